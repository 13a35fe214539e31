"""Kernelspecs that start a kernel on an instance: ``gpucloud-<instance name as a slug>``.

    >>> kernel_name("Train 1!")
    'gpucloud-train-1'
    >>> cloud.instances.install_kernel("train-1")  # doctest: +SKIP
    'gpucloud-train-1'

A spec is installed with jupyter_client's ``KernelSpecManager`` for the user (so
``JUPYTER_DATA_DIR`` is honoured) and looks like any Python kernel whose ``kernel_provisioner``
stanza names :class:`~gpucloud_nb.kernel.provisioner.GPUCloudProvisioner` with the instance id,
its name, which cloud (``sandbox`` or ``cloud``) and ``on_shutdown``. It holds no key.

Choices (the issue leaves them open):

- **Same name again.** Installing for an instance whose slug is already a spec replaces it
  (the newest instance of that name wins).
- **Stale specs.** Every install first removes the specs of this kind of cloud whose instance
  the cloud no longer has, or reports ``deleting`` / ``deleted`` (:func:`remove_stale`, which the
  Lab poller can call too). Specs of the other kind of cloud are left alone.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpucloud_nb.errors import InvalidInputError

__all__ = [
    "PREFIX",
    "PROVISIONER",
    "display_name_for",
    "display_name_of",
    "install",
    "installed",
    "kernel_name",
    "remove_stale",
]

PREFIX = "gpucloud-"
#: The entry point name of the provisioner (``jupyter_client.kernel_provisioners``).
PROVISIONER = "gpucloud-provisioner"
ON_SHUTDOWN = ("keep", "delete")


def kernel_name(instance_name: str) -> str:
    """The kernelspec name for an instance called ``instance_name``."""
    slug = re.sub(r"[^a-z0-9]+", "-", instance_name.lower()).strip("-")
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


def remove_stale(cloud_kind: str, status_of: Callable[[str], str | None]) -> list[str]:
    """Remove the specs of ``cloud_kind`` whose instance is gone; return their names.

    ``status_of(instance_id)`` is the instance's status, or ``None`` when the cloud has no such
    instance (a 404).
    """
    removed = []
    manager = _manager()
    for name, config in installed().items():
        if config.get("cloud") != cloud_kind:
            continue
        status = status_of(str(config.get("instance_id") or ""))
        if status is None or status in ("deleting", "deleted"):
            manager.remove_kernel_spec(name)
            removed.append(name)
    return removed


def install(details: Any, *, cloud_kind: str, display_name: str | None = None,
            on_shutdown: str = "keep") -> str:
    """Install (or replace) the kernelspec of the instance ``details``; return its name."""
    if on_shutdown not in ON_SHUTDOWN:
        raise InvalidInputError(f"on_shutdown must be 'keep' or 'delete', not {on_shutdown!r}.")
    if display_name is not None and (not isinstance(display_name, str) or not display_name.strip()):
        raise InvalidInputError("display_name must be a non-empty string.")
    if details.status in ("deleting", "deleted", "failed"):
        raise InvalidInputError(f"Instance {details.name or details.id} is {details.status}; a "
                                "kernel needs an active (or pending) instance.")
    name = kernel_name(details.name or details.id)
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
                           "cloud": cloud_kind, "on_shutdown": on_shutdown},
            },
        },
    }
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "kernel.json").write_text(json.dumps(spec, indent=1))
        for logo in ("logo-svg.svg", "logo-64x64.png"):  # the Launcher's tile: a GPU chip
            shutil.copy(Path(__file__).with_name(logo), folder)
        _manager().install_kernel_spec(folder, kernel_name=name, user=True)
    return name
