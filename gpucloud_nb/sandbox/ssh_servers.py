"""The SSH servers of a sandbox's active instances, kept in step with its state.

    >>> servers = InstanceServers(config, store)  # doctest: +SKIP
    >>> await servers.start()  # the home, then a server per active instance  # doctest: +SKIP

A reconciler opens a server (:class:`gpucloud_nb.sandbox.ssh.InstanceServer`) for each
instance about to turn ``active`` (it looks :data:`LEAD_SECONDS` ahead, every 0.2 s, and a
create wakes it at once) and closes those of instances deleting or deleted. At start it sweeps
the homes of instances and the folders of volumes no longer stored (deleted while no service
ran). It also keeps the file of public keys clients registered (``/sandbox/ssh-keys``), accepted
for instances created without a key. What one server does (sessions, SFTP, forwards, the
instance's processes): :mod:`gpucloud_nb.sandbox.ssh`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from gpucloud_nb.sandbox.home import private_dir
from gpucloud_nb.sandbox.lifecycle import status_at
from gpucloud_nb.sandbox.machines import machines_dir
from gpucloud_nb.sandbox.ssh import (
    SHARED_SHELL_WARNING,
    VOLUME_ID,
    InstanceServer,
    parse_keys,
)

if TYPE_CHECKING:
    from gpucloud_nb.sandbox.config import SandboxConfig
    from gpucloud_nb.sandbox.store import Store

__all__ = ["LEAD_SECONDS", "InstanceServers"]

logger = logging.getLogger("gpucloud_nb.sandbox.ssh")
_PERIOD = 0.2
LEAD_SECONDS = 1.0


class InstanceServers:
    """The SSH servers of a sandbox's active instances, kept in step with its state.

    ``start()`` makes the home (a temporary directory when ``config.home`` is ``None``) and a
    task that every 0.2 s opens a server for each newly active instance and closes those of
    instances that are deleting or deleted; ``stop()`` closes them all (and the temporary home).
    """

    def __init__(self, config: SandboxConfig, store: Store) -> None:
        self.config = config
        self.store = store
        self.home: Path | None = None
        self.machines: Path | None = None
        # Several accounts under one OS user: no shells unless the teacher accepts the risk.
        self.shell = not config.keys or config.shared_shell
        self._temporary = False
        self._servers: dict[str, InstanceServer] = {}
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()

    @property
    def authorized_keys(self) -> Path:
        """The file of keys registered by clients, accepted for instances created without one."""
        assert self.home is not None
        return self.home / "ssh" / "authorized_keys"

    def register(self, publics: list[str]) -> int:
        """Accept ``publics`` (OpenSSH public keys) for instances created without a key; each
        must be one valid key, else :class:`ValueError` and nothing is written. Returns how
        many were new."""
        keys = []
        for public in publics:
            lines = public.strip().splitlines()
            parsed = parse_keys(lines[0]) if len(lines) == 1 else []
            if not parsed:
                raise ValueError(f"Not an OpenSSH public key: {public[:40]!r}.")
            keys.append((parsed[0], lines[0].strip()))
        path = self.authorized_keys
        path.parent.mkdir(parents=True, exist_ok=True)
        present = {key.public_data for key in parse_keys(path.read_text())} \
            if path.exists() else set()
        new = []
        for key, line in keys:
            if key.public_data not in present:
                present.add(key.public_data)
                new.append(line)
        if new:
            with path.open("a") as file:
                file.write("".join(line + "\n" for line in new))
        return len(new)

    def server(self, instance_id: str) -> InstanceServer | None:
        """The running server of ``instance_id``, if any."""
        return self._servers.get(instance_id)

    def running(self) -> dict[str, InstanceServer]:
        """The running servers, by instance id (a copy)."""
        return dict(self._servers)

    async def start(self) -> None:
        """Make the home and the machines directory, and start the reconciler task."""
        if self.config.home is None:
            self.home = Path(tempfile.mkdtemp(prefix="gpucloud-nb-sandbox-"))
            self.machines = Path(tempfile.mkdtemp(prefix="gpucloud-nb-machines-"))
            self._temporary = True
        else:
            self.home = private_dir(self.config.home)
            self.machines = machines_dir(self.home)
        private_dir(self.home / "ssh")
        self._sweep()
        if self.config.keys and self.config.shared_shell:
            logger.warning(SHARED_SHELL_WARNING)
        await self.reconcile()
        self._task = asyncio.create_task(self._run(), name="gpucloud-nb-ssh-servers")

    def _sweep(self) -> None:
        """Remove the home (and commands) of every instance that is no longer live, and the
        folder of every volume that is no longer stored: one deleted while no service ran, or
        before deletes removed homes and volumes."""
        assert self.machines is not None
        live = {times.id for times in self.store.live_instance_times()}
        kept = {"volumes": self.store.volume_ids()}
        for kind in ("instances", "bin", "volumes"):
            with contextlib.suppress(OSError):
                for directory in (self.machines / kind).iterdir():
                    if directory.name not in kept.get(kind, live) and not directory.is_symlink():
                        shutil.rmtree(directory, ignore_errors=True)

    def remove_volume(self, volume_id: str) -> None:
        """Remove the folder of volume ``volume_id`` (deleted): its data goes with it, as on
        the cloud, and the disk it took is given back."""
        if self.machines is not None and VOLUME_ID.fullmatch(volume_id):
            folder = self.machines / "volumes" / volume_id
            if not folder.is_symlink():
                shutil.rmtree(folder, ignore_errors=True)

    def wake(self) -> None:
        """Reconcile now rather than at the next tick (an instance was just created)."""
        self._wake.set()

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError, asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), _PERIOD)
            self._wake.clear()
            try:
                await self.reconcile()
            except Exception:  # keep serving the others; the log has the trace
                logger.exception("The sandbox failed to update its SSH servers.")

    async def reconcile(self) -> None:
        """Open servers for instances active within ``LEAD_SECONDS``, close the others'."""
        soon = time.time_ns() // 1_000_000 + round(LEAD_SECONDS * 1000)
        wanted = [times.id for times in self.store.live_instance_times()
                  if status_at(times, soon).name == "active"]
        keep = set(wanted)
        for instance_id in [i for i in self._servers if i not in keep]:
            await self._servers.pop(instance_id).close(ended=True)  # deleting: its data goes
        for instance_id in wanted:
            if instance_id not in self._servers:
                record = self.store.instance_by_id(instance_id)  # its doc, read only now
                faults = self.config.faults
                if record is None or (faults is not None
                                      and faults.unreachable(str(record.doc.get("name", "")))):
                    continue  # an injected fault: active, and nothing listens on its SSH port
                try:
                    self._servers[instance_id] = await InstanceServer.open(self, record)
                except OSError:
                    logger.exception("The SSH server of instance %s did not start.", instance_id)

    async def stop(self) -> None:
        """Close every server and stop the reconciler; remove a temporary home."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        for server in list(self._servers.values()):
            await server.close()
        self._servers.clear()
        if self._temporary:
            for directory in (self.home, self.machines):
                if directory is not None:
                    shutil.rmtree(directory, ignore_errors=True)
