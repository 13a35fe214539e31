"""Kernelspecs that start a kernel on an instance: ``gpucloud-<instance name as a slug>``.

    >>> kernel_name("Train 1!")
    'gpucloud-train-1'
    >>> from gpucloud_nb.kernel import install_kernel
    >>> install_kernel(cloud, "train-1")  # doctest: +SKIP
    'gpucloud-train-1'

A spec is installed with jupyter_client's ``KernelSpecManager`` for the user (so
``JUPYTER_DATA_DIR`` is honoured) and looks like any Python kernel whose ``kernel_provisioner``
stanza names :class:`~gpucloud_nb.kernel.provisioner.GPUCloudProvisioner` with the instance id,
its name, which cloud (``sandbox`` or ``cloud``), ``on_shutdown`` and the installing client's
``account`` (a digest of its cloud and key, :attr:`GPUCloud.account`). It holds no key.

Choices (the issue leaves them open):

- **Same name again.** Installing for an instance whose slug is already a spec replaces it
  (the newest instance of that name wins).
- **Names beyond ASCII.** Kernelspec names are ASCII (``[a-z0-9._-]``), so a name with other
  characters is spelled in Punycode first (``训练`` → ``gpucloud-sn0al8x``): two different
  names never share a spec.
- **Stale specs.** Every install first removes the specs of the same account whose instance
  the cloud no longer has, or reports ``deleting`` / ``deleted`` (:func:`remove_stale`, which the
  Lab poller calls too). Specs of another account (another key, another sandbox home) are left
  alone: their instances are invisible to this key, not gone. A spec written before specs
  carried an account is removed only when this cloud lists its instance as deleting/deleted.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpucloud_nb.errors import InvalidInputError

if TYPE_CHECKING:
    from gpucloud_nb.client.management import AsyncGPUCloud, GPUCloud

__all__ = [
    "PREFIX",
    "PROVISIONER",
    "display_name_for",
    "display_name_of",
    "install",
    "install_kernel",
    "install_kernel_async",
    "installed",
    "kernel_name",
    "remove_stale",
]

PREFIX = "gpucloud-"
#: The entry point name of the provisioner (``jupyter_client.kernel_provisioners``).
PROVISIONER = "gpucloud-provisioner"
ON_SHUTDOWN = ("keep", "delete")


def kernel_name(instance_name: str) -> str:
    """The kernelspec name for an instance called ``instance_name`` (Punycode beyond ASCII).

        >>> kernel_name("训练") != kernel_name("测试")
        True
    """
    text = instance_name.lower()
    if not text.isascii():
        text = text.encode("punycode").decode("ascii")
    slug = re.sub(r"[^a-z0-9]+", "-", text).strip("-")
    return PREFIX + (slug or "instance")


def display_name_for(details: Any) -> str:
    """``Python 3 on <name> · <GPU> × <n>``: what the kernel menu shows."""
    gpu = str(getattr(details, "gpu_model", "") or "GPU")
    count = int(getattr(details, "gpu_count", 0) or 1)
    return f"Python 3 on {details.name or details.id} · {gpu} × {count}"


def _manager() -> Any:
    from jupyter_client.kernelspec import KernelSpecManager

    return KernelSpecManager()


def installed() -> dict[str, dict[str, Any]]:
    """This package's installed kernelspecs: name → the provisioner's config.

    Read from the ``kernel.json`` files themselves, so specs are found (and stale ones removed)
    even where jupyter_client hides them because the provisioner is not installed.
    """
    found = {}
    for name, folder in _manager().find_kernel_specs().items():
        if not name.startswith(PREFIX):
            continue
        try:
            spec = json.loads((Path(folder) / "kernel.json").read_text())
        except (OSError, ValueError):
            continue
        stanza = (spec.get("metadata") or {}).get("kernel_provisioner") or {}
        if stanza.get("provisioner_name") == PROVISIONER:
            found[name] = dict(stanza.get("config") or {})
    return found


def display_name_of(name: str) -> str:
    """The display name of the installed kernelspec ``name`` (the name itself if unreadable)."""
    folder = _manager().find_kernel_specs().get(name)
    try:
        return str(json.loads((Path(folder) / "kernel.json").read_text())["display_name"])
    except (TypeError, OSError, ValueError, KeyError):
        return name


def remove_stale(cloud_kind: str, status_of: Callable[[str], str | None],
                 account: str) -> list[str]:
    """Remove the specs of ``account`` (on ``cloud_kind``) whose instance is gone; their names.

    ``status_of(instance_id)`` is the instance's status as this account's client sees it, or
    ``None`` when it has no such instance. Specs of other accounts are kept (see the module).
    """
    removed = []
    manager = _manager()
    for name, config in installed().items():
        if config.get("cloud") != cloud_kind:
            continue
        owner = config.get("account")
        if owner is not None and owner != account:
            continue
        status = status_of(str(config.get("instance_id") or ""))
        gone = status in ("deleting", "deleted")
        if gone or (status is None and owner == account):
            manager.remove_kernel_spec(name)
            removed.append(name)
    return removed


def install(details: Any, *, cloud_kind: str, account: str, display_name: str | None = None,
            on_shutdown: str = "keep", name: str | None = None) -> str:
    """Install (or replace) the kernelspec of the instance ``details``; return its name
    (``name``, else :func:`kernel_name` of the instance's: a moved kernel keeps its name)."""
    if on_shutdown not in ON_SHUTDOWN:
        raise InvalidInputError(f"on_shutdown must be 'keep' or 'delete', not {on_shutdown!r}.")
    if display_name is not None and (not isinstance(display_name, str) or not display_name.strip()):
        raise InvalidInputError("display_name must be a non-empty string.")
    if details.status in ("deleting", "deleted", "failed"):
        raise InvalidInputError(f"Instance {details.name or details.id} is {details.status}; a "
                                "kernel needs an active (or pending) instance.")
    name = name or kernel_name(details.name or details.id)
    spec = {
        "argv": ["python3", "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": display_name or display_name_for(details),
        "language": "python",
        "interrupt_mode": "signal",
        "metadata": {
            "debugger": False,
            "kernel_provisioner": {
                "provisioner_name": PROVISIONER,
                "config": {"instance_id": details.id, "instance_name": details.name,
                           "cloud": cloud_kind, "on_shutdown": on_shutdown,
                           "account": account},
            },
        },
    }
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "kernel.json").write_text(json.dumps(spec, indent=1))
        for logo in ("logo-svg.svg", "logo-64x64.png"):  # the Launcher's tile: a GPU chip
            shutil.copy(Path(__file__).with_name(logo), folder)
        _manager().install_kernel_spec(folder, kernel_name=name, user=True)
    return name


def install_kernel(cloud: GPUCloud, id_or_name: str, *, display_name: str | None = None,
                   on_shutdown: str = "keep") -> str:
    """Install the kernelspec ``gpucloud-<name>`` that runs a kernel on the instance; its name.

    In JupyterLab, Kernel → Change Kernel → "Python 3 on <name> · <GPU> × <n>". With
    ``on_shutdown="delete"`` the instance is deleted when that kernel shuts down. This
    account's specs of deleted instances are removed first.

        >>> from gpucloud_nb.kernel import install_kernel
        >>> install_kernel(cloud, "train-1")  # doctest: +SKIP
        'gpucloud-train-1'
    """
    details = cloud.instances.get(id_or_name)
    kind = "sandbox" if cloud.is_sandbox else "cloud"
    statuses = {i.id: i.status for i in cloud.instances.list()}
    remove_stale(kind, statuses.get, cloud.account)
    return install(details, cloud_kind=kind, account=cloud.account, display_name=display_name,
                   on_shutdown=on_shutdown)


async def install_kernel_async(cloud: AsyncGPUCloud, id_or_name: str, *,
                               display_name: str | None = None, on_shutdown: str = "keep") -> str:
    """The coroutine twin of :func:`install_kernel`, for an :class:`AsyncGPUCloud`.

        >>> await install_kernel_async(acloud, "train-1")  # doctest: +SKIP
        'gpucloud-train-1'
    """
    details = await cloud.instances.get(id_or_name)
    kind = "sandbox" if cloud.is_sandbox else "cloud"
    statuses = {i.id: i.status for i in await cloud.instances.list()}
    await asyncio.to_thread(remove_stale, kind, statuses.get, cloud.account)
    return await asyncio.to_thread(install, details, cloud_kind=kind, account=cloud.account,
                                   display_name=display_name, on_shutdown=on_shutdown)
