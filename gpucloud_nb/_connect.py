"""``connect()``: the real cloud when a key is set, otherwise the local sandbox.

    >>> from gpucloud_nb import connect
    >>> cloud = connect()
    gpucloud-nb: SANDBOX — a simulated cloud on this machine at http://127.0.0.1:…; no real GPUs, no charges.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from typing import Any

from gpucloud_nb.client.management import GPUCloud
from gpucloud_nb.errors import GPUCloudError, NotFoundError

__all__ = ["connect", "shared_sandbox"]

_lock = threading.Lock()
_sandbox: Any = None


def shared_sandbox(launch_seconds: float | None = None) -> Any:
    """Start (once per process) and return the sandbox that ``connect()`` uses.

    ``launch_seconds`` (or ``GPUCLOUD_SANDBOX_LAUNCH_SECONDS``) sets how long instances stay
    pending; it only applies when this call starts the sandbox. ``GPUCLOUD_SANDBOX_API_KEY`` and
    ``GPUCLOUD_SANDBOX_INFERENCE_SECRET`` replace the sandbox's public default key and secret
    (the secret-leak tests use recognisable ones).
    """
    global _sandbox
    with _lock:
        if _sandbox is None:
            from gpucloud_nb.sandbox import Sandbox  # the server stack loads only here

            if launch_seconds is None:
                launch_seconds = float(os.environ.get("GPUCLOUD_SANDBOX_LAUNCH_SECONDS", "3"))
            keys = {
                option: os.environ[variable]
                for option, variable in (("api_key", "GPUCLOUD_SANDBOX_API_KEY"),
                                         ("inference_secret", "GPUCLOUD_SANDBOX_INFERENCE_SECRET"))
                if os.environ.get(variable)
            }
            _sandbox = Sandbox(launch_seconds=launch_seconds, **keys).start()
            atexit.register(_sandbox.stop)
        return _sandbox


def connect(
    *,
    max_hourly_cost: float | None = None,
    cleanup_on_exit: bool = False,
    sandbox: bool | None = None,
    launch_seconds: float | None = None,
    quiet: bool = False,
) -> GPUCloud:
    """Return a client: the real cloud if ``GPUCLOUD_API_KEY`` is set, else the local sandbox.

    The sandbox is announced on stdout, so nobody mistakes it for the real cloud. Pass
    ``sandbox=True`` to use it even with a key set. ``cleanup_on_exit=True`` deletes, when the
    Python process ends normally, every instance this client launched (a killed kernel cannot).

        >>> cloud = connect(max_hourly_cost=5, cleanup_on_exit=True)
    """
    use_sandbox = sandbox if sandbox is not None else not os.environ.get("GPUCLOUD_API_KEY")
    if use_sandbox:
        box = shared_sandbox(launch_seconds)
        cloud = GPUCloud(api_key=box.api_key, base_url=box.management_url,
                         max_hourly_cost=max_hourly_cost)
        cloud.sandbox = box
        if not quiet:
            print(
                f"gpucloud-nb: SANDBOX — a simulated cloud on this machine at "
                f"{box.management_url}; no real GPUs, no charges. Set GPUCLOUD_API_KEY and "
                "GPUCLOUD_BASE_URL to use the real cloud.",
                flush=True,
            )
    else:
        cloud = GPUCloud(max_hourly_cost=max_hourly_cost)
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
    with GPUCloud(api_key=cloud._core.key.reveal(), base_url=cloud.base_url) as own:
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
