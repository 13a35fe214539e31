"""Whose process is at the other end of a loopback TCP connection: the check of every SSH forward.

A forward (``cloud.instances.forward``, a cluster's dashboard) listens on ``127.0.0.1``, which
every user of the machine can reach, and speaks plain HTTP that a browser must open, so neither
a Unix socket nor TLS can keep others out. On Linux the kernel says who owns each TCP socket
(``/proc/net/tcp`` and ``tcp6``): a connection whose other end belongs to another user is
refused before anything is forwarded.

Chosen where nothing says otherwise: where ``/proc/net/tcp`` cannot be read (macOS, Windows)
nothing can be asked, and every local connection is forwarded, as an SSH ``-L`` forward does; a
connection the table does not show (gone already) is refused.

    >>> sorted(_hex("127.0.0.1", 8787))  # how /proc/net/tcp and tcp6 write 127.0.0.1:8787
    ['0000000000000000FFFF00000100007F:2253', '0100007F:2253']
"""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path

__all__ = ["owners", "same_user"]

_TABLES = (Path("/proc/net/tcp"), Path("/proc/net/tcp6"))


def _hex(host: str, port: int) -> set[str]:
    """``host:port`` as the kernel's tables write it (32-bit words in host order, which is
    little-endian on every machine this runs on), for IPv4 and for IPv4 mapped into IPv6."""
    address = ipaddress.ip_address(host)
    forms: list[bytes] = [address.packed]
    if address.version == 4:
        forms.append(ipaddress.IPv6Address(f"::ffff:{address}").packed)
    written = set()
    for packed in forms:
        words = "".join(packed[i:i + 4][::-1].hex().upper() for i in range(0, len(packed), 4))
        written.add(f"{words}:{port:04X}")
    return written


def owners(host: str, port: int) -> set[int] | None:
    """The uids owning a TCP socket whose local address is ``host:port`` (empty: none), or
    ``None`` where the kernel's tables cannot be read."""
    wanted = _hex(host, port)
    found: set[int] = set()
    read = False
    for table in _TABLES:
        try:
            lines = table.read_text().splitlines()[1:]
        except OSError:
            continue
        read = True
        for line in lines:
            fields = line.split()
            if len(fields) > 7 and fields[1] in wanted:
                found.add(int(fields[7]))
    return found if read else None


def same_user(host: str, port: int) -> bool:
    """Whether the socket at ``host:port`` (the far end of a connection to a forward) belongs to
    this process's user; ``True`` where no one can tell (see the module docs).

        >>> same_user("127.0.0.1", 1)  # on Linux: no connection from port 1  # doctest: +SKIP
        False
    """
    try:
        found = owners(host, port)
    except ValueError:  # not an address
        return False
    if found is None:
        return True
    return found == {os.getuid()}
