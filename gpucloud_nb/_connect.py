"""``connect()``: the real cloud when a key is set, otherwise the local sandbox; either one
through the user's personal gateway, which keeps the money rules.

    >>> from gpucloud_nb import connect
    >>> cloud = connect()  # doctest: +SKIP
    gpucloud-nb: SANDBOX — a simulated cloud on this machine at http://127.0.0.1:…; no real GPUs, no charges.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from typing import TYPE_CHECKING

from gpucloud_nb._notebook import install_error_display
from gpucloud_nb.client.hub import connect_hub
from gpucloud_nb.client.management import GPUCloud
from gpucloud_nb.errors import GPUCloudError, NotFoundError

if TYPE_CHECKING:
    from gpucloud_nb.sandbox.service import Runtime

__all__ = ["DIRECT_SENTENCE", "cloud_settings", "connect", "sandbox_settings", "shared_sandbox"]

#: What ``connect()`` says when ``GPUCLOUD_GATEWAY=off``.
DIRECT_SENTENCE = ("gpucloud-nb: GPUCLOUD_GATEWAY=off: talking to the cloud directly, so no "
                   "gateway watches money: a create with delete_after, budget or "
                   "delete_when_idle is refused, and nothing deletes for you.")

_lock = threading.Lock()
_announced: set[str] = set()  # the sandboxes whose banner this process has printed


def shared_sandbox(launch_seconds: float | None = None) -> Runtime:
    """Find the user's sandbox service, or start it in the background; return its runtime.

    The service (see :mod:`gpucloud_nb.sandbox.service`) lives in the sandbox home
    (``GPUCLOUD_SANDBOX_HOME``, else the user data dir) and outlives this kernel: every kernel of
    the user shares it, and its instances keep running and billing after the kernel ends.
    ``launch_seconds`` (or ``GPUCLOUD_SANDBOX_LAUNCH_SECONDS``), ``GPUCLOUD_SANDBOX_API_KEY`` and
    ``GPUCLOUD_SANDBOX_INFERENCE_SECRET`` apply when this call starts the service; a running
    service keeps its own settings (``gpucloud-nb sandbox stop`` first to change them).

    No key is sent to a service before it is verified (its pid is ours and holds the home's
    lock, and it answers a challenge with the home's secret); a home another user could have
    written in, or one that cannot be made or written, is a
    :class:`~gpucloud_nb.errors.ConnectionFailedError` of one sentence.
    """
    from gpucloud_nb.sandbox.service import find_or_start  # no web stack: the service has it

    if launch_seconds is None and os.environ.get("GPUCLOUD_SANDBOX_LAUNCH_SECONDS"):
        launch_seconds = float(os.environ["GPUCLOUD_SANDBOX_LAUNCH_SECONDS"])
    with _lock:
        return find_or_start(launch_seconds=launch_seconds,
                             api_key=os.environ.get("GPUCLOUD_SANDBOX_API_KEY") or None,
                             inference_secret=os.environ.get("GPUCLOUD_SANDBOX_INFERENCE_SECRET")
                             or None)


def cloud_settings() -> tuple[str, str, bool]:
    """``(api_key, base_url, through_gateway)`` for the real cloud of ``GPUCLOUD_API_KEY`` and
    ``GPUCLOUD_BASE_URL``: the user's personal gateway's, found or started in the background (see
    :mod:`gpucloud_nb.gateway.personal`), unless ``GPUCLOUD_GATEWAY=off`` or the base URL is a
    class gateway already (it keeps the money rules); then the given ones.

    The cloud's key goes only to the gateway, through its environment; the key returned is the
    gateway's own local key. A missing key or base URL is one sentence
    (:class:`~gpucloud_nb.errors.InvalidInputError`).
    """
    from gpucloud_nb.client._auth import settings
    from gpucloud_nb.gateway import personal  # no web stack: the gateway's process has it

    key, url = settings(None, None)
    if personal.off() or _is_gateway(key.reveal(), url):
        return key.reveal(), url, False
    with _lock:
        runtime = personal.find_or_start(url, key.reveal())
    return runtime.api_key, runtime.management_url, True


def sandbox_settings(launch_seconds: float | None = None) -> tuple[Runtime, str, str, bool]:
    """``(box, api_key, base_url, through_gateway)`` for the user's sandbox service (see
    :func:`shared_sandbox`): the personal gateway in front of it, found or started in the
    background as for the real cloud (:func:`gpucloud_nb.gateway.personal.sandbox_home`), which
    keeps timers, budgets and idle deletes; with ``GPUCLOUD_GATEWAY=off``, the sandbox itself.

    The sandbox's key goes only to the gateway, through its environment, and to the sandbox's
    own service routes (``POST /sandbox/ssh-keys``); the key returned is the gateway's own.
    """
    from gpucloud_nb.gateway import personal  # no web stack: the gateway's process has it

    box = shared_sandbox(launch_seconds)
    if personal.off():
        return box, box.api_key, box.management_url, False
    with _lock:
        runtime = personal.find_or_start(box.management_url, box.api_key,
                                         home=personal.sandbox_home(box.home, box.api_key),
                                         upstream_pid=box.pid)
    return box, runtime.api_key, runtime.management_url, True


_gateways: dict[tuple[str, str], bool] = {}  # (url, key) -> whether it is a gateway already


def _is_gateway(key: str, url: str) -> bool:
    """True when ``url`` is a gateway already (a class's: ``GET /gateway/me`` answers for the
    key), which keeps the money rules itself; asked once per process. Any failure counts as the
    cloud: the personal gateway then stands in front and reports what the cloud says."""
    if (url, key) not in _gateways:
        try:
            with GPUCloud(api_key=key, base_url=url, max_retries=0, timeout=10.0) as probe:
                _gateways[(url, key)] = probe.gateway_status() is not None
        except GPUCloudError:
            return False
    return _gateways[(url, key)]


def _differences(box: Runtime, launch_seconds: float | None) -> list[str]:
    """The settings asked for that the running service does not have."""
    if launch_seconds is None and os.environ.get("GPUCLOUD_SANDBOX_LAUNCH_SECONDS"):
        launch_seconds = float(os.environ["GPUCLOUD_SANDBOX_LAUNCH_SECONDS"])
    asked = [("launch_seconds", launch_seconds is not None
              and float(launch_seconds) != box.launch_seconds),
             ("API key", os.environ.get("GPUCLOUD_SANDBOX_API_KEY", box.api_key) != box.api_key),
             ("inference secret", os.environ.get("GPUCLOUD_SANDBOX_INFERENCE_SECRET",
                                                 box.inference_secret) != box.inference_secret)]
    return [name for name, differs in asked if differs]


def connect(
    *,
    max_hourly_cost: float | None = None,
    cleanup_on_exit: bool = False,
    sandbox: bool | None = None,
    launch_seconds: float | None = None,
    quiet: bool = False,
    ssh_identity: str | os.PathLike[str] | None = None,
) -> GPUCloud:
    """Return a client: the real cloud if ``GPUCLOUD_API_KEY`` is set, else the local sandbox.

    The real cloud is reached through the user's personal gateway (see :func:`cloud_settings`),
    which keeps timers, budgets and idle deletes whether or not a kernel runs;
    ``GPUCLOUD_GATEWAY=off`` talks to the cloud directly, and then no gateway watches money (one
    sentence says so, and a create with any of them is refused).

    The sandbox is the user's sandbox service, found or started in the background (see
    :func:`shared_sandbox`): one cloud for every kernel, whose instances outlive this one,
    reached through a personal gateway of its own, as the real cloud is (see
    :func:`sandbox_settings`). It is announced on stdout, once per kernel, so nobody mistakes it
    for the real cloud. Pass
    ``sandbox=True`` to use it even with a key set. ``cleanup_on_exit=True`` deletes, when the
    Python process ends normally, every instance this client launched (a killed kernel cannot).
    ``ssh_identity`` is the private key file SSH use offers first (else ``GPUCLOUD_SSH_KEY``).
    Inside IPython it also makes the shell show this package's errors as one sentence (see
    :mod:`gpucloud_nb._notebook`).

        >>> cloud = connect(max_hourly_cost=5, cleanup_on_exit=True)  # doctest: +SKIP
    """
    install_error_display()
    if (hub := connect_hub(sandbox, max_hourly_cost=max_hourly_cost, ssh_identity=ssh_identity,
                           quiet=quiet, at_exit=_cleanup if cleanup_on_exit else None)):
        return hub  # a JupyterHub's gateway service, found from the hub's environment
    use_sandbox = sandbox if sandbox is not None else not os.environ.get("GPUCLOUD_API_KEY")
    if use_sandbox:
        box, key, url, through_gateway = sandbox_settings(launch_seconds)
        cloud = GPUCloud(api_key=key, base_url=url, max_hourly_cost=max_hourly_cost,
                         ssh_identity=ssh_identity)
        cloud.sandbox = box
        if not quiet:
            said = f"{through_gateway}:{box.management_url}"
            if said not in _announced:
                # Once per process (per kernel), in short lines: JupyterLab breaks a long output
                # line anywhere, even mid-word, so no line here needs wrapping.
                _announced.add(said)
                keeper = (f"\n  Timers, budgets and idle deletes: your personal gateway at {url}"
                          if through_gateway else "")
                print("gpucloud-nb: SANDBOX — a simulated cloud on this machine: no real GPUs, "
                      f"no charges.\n  It runs at {box.management_url}{keeper}\n  To use the "
                      "real cloud, set GPUCLOUD_API_KEY and GPUCLOUD_BASE_URL.", flush=True)
                if not through_gateway:  # the sandbox keeps no money rule either
                    print(DIRECT_SENTENCE, flush=True)
            differing = _differences(box, launch_seconds)
            if differing:
                print(f"gpucloud-nb: the sandbox service was already running and keeps its own "
                      f"{', '.join(differing)}; `gpucloud-nb sandbox stop` first to apply yours.",
                      flush=True)
    else:
        key, url, through_gateway = cloud_settings()
        cloud = GPUCloud(api_key=key, base_url=url, max_hourly_cost=max_hourly_cost,
                         ssh_identity=ssh_identity)
        said = f"{through_gateway}:{url}"
        if not quiet and said not in _announced:
            _announced.add(said)
            print(f"gpucloud-nb: the cloud through your personal gateway at {url}, which keeps "
                  "timers, budgets and idle deletes while no notebook runs (`gpucloud-nb gateway stop` stops "
                  "it)." if through_gateway else DIRECT_SENTENCE, flush=True)
    if cleanup_on_exit:
        atexit.register(_cleanup, cloud)
    return cloud


def _cleanup(cloud: GPUCloud) -> None:
    """Delete every instance ``cloud`` launched that is not already gone.

    It uses a connection of its own (``cloud`` may be closed by now) and prints one line to
    stderr for each instance it could not delete, so nothing keeps billing without a word.
    """
    if not cloud.created_instance_ids:
        return
    with cloud.own_client() as own:
        for instance_id in cloud.created_instance_ids:
            try:
                if own.instances.get(instance_id).status not in ("deleting", "deleted"):
                    own.instances.delete(instance_id)
            except NotFoundError:
                continue
            except Exception as error:  # at exit nobody else will say it
                reason = str(error) if isinstance(error, GPUCloudError) else type(error).__name__
                print(f"gpucloud-nb: could not delete instance {instance_id} at exit; it may "
                      f"still be billing: {reason}", file=sys.stderr, flush=True)
