"""The gateway's own SSH key: made once in its home, used only to read its instances' GPU use.

    >>> key = gateway_key(None)  # no home: a key in memory, for a gateway that keeps no state
    >>> public_line(key).startswith("ssh-ed25519 ")
    True

With a home, the private key is ``<home>/ssh/gateway_ed25519`` (the folder 0700, the file 0600,
written by asyncssh in OpenSSH's format) and is made only when it is missing, so every instance
launched through the gateway, before and after a restart, accepts the same key. The private key
is never logged nor answered; only :func:`public_line` leaves this module (into a create's
cloud-init, see :mod:`gpucloud_nb.gateway.cloud_init`). A key file that cannot be read is
replaced by a fresh one and the log says so (instances made with the old key can then no longer
be measured: their GPU counts as unreadable, so idle, by the one rule).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import asyncssh

from gpucloud_nb.sandbox.home import private_dir

__all__ = ["COMMENT", "gateway_key", "public_line"]

log = logging.getLogger("uvicorn.error")
COMMENT = "gpucloud-nb-gateway"
KEY_FILE = "gateway_ed25519"


def gateway_key(home: Path | None) -> asyncssh.SSHKey:
    """The gateway's private key, read from ``home`` or made there (in memory without one)."""
    if home is None:
        return asyncssh.generate_private_key("ssh-ed25519", comment=COMMENT)
    path = private_dir(Path(home) / "ssh") / KEY_FILE
    if path.exists():
        try:
            return asyncssh.read_private_key(str(path))
        except (asyncssh.KeyImportError, OSError, ValueError):
            log.warning("gateway: its SSH key file %s could not be read; a new key is made.", path)
    key = asyncssh.generate_private_key("ssh-ed25519", comment=COMMENT)
    part = path.with_suffix(".part")
    descriptor = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as file:
        file.write(key.export_private_key())
    os.replace(part, path)
    return key


def public_line(key: asyncssh.SSHKey) -> str:
    """The OpenSSH public-key line of ``key`` (what an ``authorized_keys`` file holds)."""
    return key.export_public_key().decode().strip()
