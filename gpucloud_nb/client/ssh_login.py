"""Log in to an instance over SSH: the keys offered, the host key checked, the tries.

    >>> connection, accepted = await log_in(details, offered, key_dir(None))  # doctest: +SKIP

The rules (the module docstring of :mod:`gpucloud_nb.client.remote` says them for users):
keys are offered one at a time, as OpenSSH does (:mod:`gpucloud_nb.client.ssh_keys` finds
them); host keys are accept-new, kept in the client's own ``known_hosts`` (``<instance id>
<key>`` lines next to its key pair, OpenSSH's format, read by the printed command through
``HostKeyAlias``), and a different key later is refused in one sentence; a server that is not
ready yet is tried again, up to :data:`CONNECT_TRIES` times.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpucloud_nb.client import ssh_keys
from gpucloud_nb.errors import ConnectionFailedError, KeysRefusedError

if TYPE_CHECKING:
    import asyncssh

    from gpucloud_nb.client.sandbox_handle import SandboxHandle
    from gpucloud_nb.models import InstanceDetails

__all__ = ["CONNECT_TRIES", "KnownHosts", "default_public_key", "key_dir", "log_in"]

#: How many times a connection is tried (a new instance's server may be seconds from ready).
CONNECT_TRIES = 20


def key_dir(sandbox: SandboxHandle | None) -> Path:
    """Where the client keeps its key pair and known_hosts for ``sandbox`` (or the real cloud)."""
    home = sandbox.home if sandbox is not None else None
    if home is not None:
        directory = Path(home) / "client"
    else:
        import platformdirs

        directory = Path(platformdirs.user_config_dir("gpucloud-nb", appauthor=False)) / "ssh"
    directory.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(OSError):
        directory.chmod(0o700)
    return directory


def default_public_key(sandbox: SandboxHandle | None = None,
                       identity: str | os.PathLike[str] | None = None) -> str:
    """The OpenSSH public key ``create`` sends when none is given: the first key the client
    offers (see :mod:`gpucloud_nb.client.ssh_keys`)."""
    return ssh_keys.identities_sync(identity, key_dir(sandbox))[0].public


class KnownHosts:
    """The client's own known_hosts: ``<instance id> <public key>`` lines, accept-new."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    def get(self, name: str) -> str | None:
        if not self.path.exists():
            return None
        for line in self.path.read_text().splitlines():
            parts = line.split(None, 1)
            if len(parts) == 2 and parts[0] == name:
                return parts[1].strip()
        return None

    def add(self, name: str, key: str) -> None:
        with self._lock, self.path.open("a") as file:
            file.write(f"{name} {key}\n")

async def log_in(details: InstanceDetails, offered: list[ssh_keys.Identity], directory: Path
                 ) -> tuple[asyncssh.SSHClientConnection, ssh_keys.Identity | None]:
    """A new connection to the instance, offering ``offered`` in turn and checking its host key
    against ``directory/known_hosts`` (stored there on first sight); the key it accepted."""
    import asyncssh

    known = KnownHosts(directory / "known_hosts")
    stored = known.get(details.id)
    trusted: tuple[list[asyncssh.SSHKey], list[Any], list[Any]] | None
    trusted = ([asyncssh.import_public_key(stored)], [], []) if stored else None
    error: Exception | None = None
    for attempt in range(CONNECT_TRIES):
        offers = _offering([identity.pair for identity in offered])
        try:
            connection = await asyncssh.connect(
                details.ip, details.ssh_port, username=details.ssh_user or "ubuntu",
                client_factory=lambda chosen=offers: chosen, client_keys=None, known_hosts=trusted,
                agent_path=None,
                config=[], preferred_auth="publickey", connect_timeout=15,
            )
            break
        except asyncssh.HostKeyNotVerifiable:
            raise ConnectionFailedError(
                f"Instance {details.id} shows a different SSH host key than before; refusing "
                f"to connect (if it was rebuilt, remove its line from {known.path})."
            ) from None
        except asyncssh.PermissionDenied:
            if stored is None:  # still learn the host key, for a command using another key
                with contextlib.suppress(OSError, asyncssh.Error):
                    shown = await asyncssh.get_server_host_key(details.ip, details.ssh_port)
                    if shown is not None:
                        known.add(details.id, shown.export_public_key().decode().strip())
            tried = ", ".join(identity.label for identity in offered)
            raise KeysRefusedError(
                f"Instance {details.id} refused this client's SSH keys (tried {tried}); "
                "give the private key whose public half the instance was created with as "
                "connect(ssh_identity=...) or GPUCloud(ssh_identity=...), or in "
                "GPUCLOUD_SSH_KEY."
            ) from None
        except (OSError, asyncssh.Error) as failure:  # the server may be seconds from ready
            error = failure
            await asyncio.sleep(min(0.1 * (attempt + 1), 0.5))
    else:
        raise ConnectionFailedError(
            f"Could not connect to instance {details.id} over SSH at "
            f"{details.ip}:{details.ssh_port}: {error}."
        )
    if stored is None:
        key = connection.get_server_host_key()
        if key is not None:
            known.add(details.id, key.export_public_key().decode().strip())
    accepted = None if offers.accepted is None else offered[offers.accepted]
    return connection, accepted


def _offering(pairs: list[Any]) -> Any:
    """An asyncssh client that offers ``pairs`` one at a time; ``.accepted`` is the index of the
    key the server accepted (None if none was)."""
    import asyncssh

    class Offers(asyncssh.SSHClient):
        def __init__(self) -> None:
            self.index = -1
            self.accepted: int | None = None

        def public_key_auth_requested(self) -> Any:
            self.index += 1
            return pairs[self.index] if self.index < len(pairs) else None

        def auth_completed(self) -> None:
            self.accepted = self.index if 0 <= self.index < len(pairs) else None

    return Offers()
