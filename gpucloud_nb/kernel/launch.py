"""The steps of a kernel's start on an instance, before its sockets are forwarded.

:class:`Launching` is a mixin of :class:`~gpucloud_nb.kernel.provisioner.GPUCloudProvisioner`
(its module docstring says the order and the choices): the client found (no secret in the
kernelspec), the instance reached (a pending one waited for, a gone one one sentence naming
the newest checkpoint), ``ipykernel`` checked and installed with ``pip --user`` if missing, the
connection file written over SFTP (mode 0600), the kernel started under ``nohup`` and the ports
it bound read back.

    >>> RUNTIME_DIR
    '.local/share/jupyter/runtime'
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shlex
from typing import TYPE_CHECKING, Any

from gpucloud_nb.errors import InvalidInputError, KernelStartError, NotFoundError
from gpucloud_nb.kernel.forwards import PORT_NAMES
from gpucloud_nb.kernel.lost import checkpoint_hint

if TYPE_CHECKING:
    from pathlib import Path

    from gpucloud_nb.client.management import GPUCloud
    from gpucloud_nb.client.remote import Remote
    from gpucloud_nb.models import InstanceDetails

__all__ = ["RUNTIME_DIR", "START_TIMEOUT", "Launching"]

#: Where kernel connection files live on the instance, relative to its home (Jupyter's own).
RUNTIME_DIR = ".local/share/jupyter/runtime"
#: How long the kernel may take to write its ports (and what a start may take beyond a local one).
START_TIMEOUT = 60.0


class Launching:
    """The start's steps, for a provisioner (see the module docstring)."""

    # The provisioner's own state, used here.
    _client: GPUCloud | None
    _remote: Remote | None
    _details: InstanceDetails | None
    _pid: int | None
    _file: str
    instance_id: str
    cloud: str
    wait_seconds: float

    if TYPE_CHECKING:  # the provisioner's own methods
        @property
        def notebook_folder(self) -> Path: ...
        def _say(self, line: str) -> None: ...
        def _label(self) -> str: ...
        async def _on_loop(self, coroutine: Any) -> Any: ...
        async def _sh(self, command: str, timeout: float | None = None) -> Any: ...
        async def ssh_connection(self) -> Any: ...
        async def poll(self) -> int | None: ...

    def _new_client(self) -> GPUCloud:
        if self.cloud == "sandbox":
            from gpucloud_nb._connect import connect

            return connect(sandbox=True, quiet=True)
        from gpucloud_nb._connect import cloud_settings
        from gpucloud_nb.client.management import GPUCloud

        try:  # through the user's personal gateway, as connect() (unless GPUCLOUD_GATEWAY=off)
            key, url, _ = cloud_settings()
            return GPUCloud(api_key=key, base_url=url)
        except InvalidInputError:
            raise InvalidInputError(
                f"Instance {self._label()} is on the cloud and this Jupyter server has no "
                "GPUCLOUD_API_KEY; set it (and GPUCLOUD_BASE_URL) before starting Jupyter."
            ) from None

    async def _reach(self) -> tuple[Remote, InstanceDetails]:
        if not self.instance_id:
            raise InvalidInputError("This kernelspec names no instance; install it again with "
                                    "gpucloud_nb.kernel.install_kernel(cloud, ...).")
        if self._client is None:
            self._client = await asyncio.to_thread(self._new_client)
        client = self._client
        try:
            details = await asyncio.to_thread(client.instances.get, self.instance_id)
        except NotFoundError:
            raise InvalidInputError(self._gone_sentence("no longer exists")) from None
        if details.status in ("deleting", "deleted"):
            raise InvalidInputError(self._gone_sentence(f"is {details.status}"))
        if details.status == "pending":
            self._say(f"Instance {self._label()} is pending; waiting until it is active…")

            def progress(current: InstanceDetails, elapsed: float) -> None:
                self._say(f"  still {current.status} after {elapsed:.0f} s")

            details = await asyncio.to_thread(client.instances.wait_until_active,
                                              self.instance_id, timeout=self.wait_seconds,
                                              on_progress=progress)
        remote, details = await asyncio.to_thread(client.instances.ssh, self.instance_id)
        self._remote, self._details = remote, details
        return remote, details

    def _gone_sentence(self, what: str) -> str:
        return (f"Instance {self._label()} {what}, so this kernel cannot start; pick another "
                "kernel, or install one for an active instance with %gpucloud kernel NAME"
                f"{checkpoint_hint(self.notebook_folder)}.")

    async def _ensure_ipykernel(self, remote: Remote, details: InstanceDetails) -> None:
        check = ("python3 -c 'import sys' >/dev/null 2>&1 || exit 3; "
                 "python3 -c 'import ipykernel' >/dev/null 2>&1 || exit 4")
        status = (await self._sh(check, timeout=60)).exit_status
        if status == 3:
            raise KernelStartError(f"Instance {self._label()} has no working python3, so it cannot "
                                   "run a notebook kernel; use an image with Python 3.")
        if status != 4:
            return
        self._say(f"Installing ipykernel and ipywidgets on instance {self._label()} "
                  "(pip install --user)…")
        lines: list[str] = []

        def seen(line: str) -> None:
            lines.append(line)
            self._say("  " + line)

        async def install() -> Any:
            await self.ssh_connection()
            return await remote.run_async(
                details, "python3 -m pip install --user --progress-bar off ipykernel ipywidgets",
                timeout=900, on_output=seen)

        result = await self._on_loop(install())
        if result.exit_status != 0:
            raise KernelStartError(f"Could not install ipykernel on instance {self._label()}: "
                                   f"{_why_pip_failed(lines)}.")

    async def _write_file(self, text: str) -> None:
        import asyncssh

        connection = await self.ssh_connection()
        async with connection.start_sftp_client() as sftp:
            await sftp.makedirs(RUNTIME_DIR, exist_ok=True)
            attrs = asyncssh.SFTPAttrs(permissions=0o600)
            async with sftp.open(self._file, "w", attrs) as file:
                await file.write(text)

    async def _read_file(self) -> dict[str, Any]:
        connection = await self.ssh_connection()
        async with connection.start_sftp_client() as sftp, sftp.open(self._file, "r") as file:
            data: dict[str, Any] = json.loads(await file.read())
            return data

    async def _start(self, cmd: list[str], folder: str) -> int:
        place = "\"$HOME\"/" + shlex.quote(folder) if folder else "\"$HOME\""
        connection_file = "\"$HOME\"/" + shlex.quote(self._file)
        log = "\"$HOME\"/" + shlex.quote(self._file[:-len(".json")] + ".log")
        argv = " ".join(connection_file if part == "{connection_file}" else shlex.quote(part)
                        for part in cmd)
        command = (f"mkdir -p {place} && cd {place} && "
                   f"nohup {argv} >{log} 2>&1 </dev/null & echo $!")
        result = await self._sh(command, timeout=30)
        try:
            return int(result.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise KernelStartError(f"The kernel did not start on instance {self._label()}: "
                                   f"{(result.stderr or result.stdout).strip()[:200]}.") from None

    async def _ports(self) -> dict[str, int]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + START_TIMEOUT
        checks = 0
        while loop.time() < deadline:
            with contextlib.suppress(Exception):
                info = await self._on_loop(self._read_file())
                ports = {name: int(info.get(name) or 0) for name in PORT_NAMES}
                if all(ports.values()):
                    return ports
            checks += 1
            if checks % 10 == 0 and await self.poll() is not None:
                self._pid = None
                tail = await self._sh(f"tail -n 5 \"$HOME\"/"
                                      f"{shlex.quote(self._file[:-len('.json')] + '.log')}")
                last = [line for line in tail.stdout.splitlines() if line.strip()]
                raise KernelStartError(f"The kernel on instance {self._label()} exited while "
                                       f"starting: {last[-1] if last else 'no output'}.")
            await asyncio.sleep(0.1)
        raise KernelStartError(f"The kernel on instance {self._label()} did not open its ports "
                               f"within {START_TIMEOUT:.0f} s.")



def _why_pip_failed(lines: list[str]) -> str:
    text = "\n".join(lines).lower()
    if "no module named pip" in text:
        return "it has no pip (install python3-pip)"
    if any(word in text for word in ("network is unreachable", "connection refused",
                                     "temporary failure in name resolution",
                                     "could not find a version")):
        return "it cannot reach the package index (no network?)"
    last = [line.strip() for line in lines if line.strip()]
    return last[-1] if last else "pip failed without a message"
