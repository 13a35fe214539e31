"""``%%gpucloud run`` and ``%gpucloud put/get``: use an instance over SSH from notebook cells.

    %%gpucloud run my-instance
    nvidia-smi

    %%gpucloud run my-instance --python
    import platform; print(platform.node())

    %gpucloud put data.csv my-instance:data.csv
    %gpucloud get my-instance:results.csv results.csv

``INSTANCE`` is an instance's name or its ``_id``, resolved by ``cloud.instances.get`` (see
:mod:`gpucloud_nb.client.instances`). The cell
runs as a shell script (``--python``: with ``python3``); its output streams into the cell as it
comes. Interrupting the kernel stops the remote process. A non-zero exit status, like every
other failure, is one line on stderr; nothing returns a value.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from gpucloud_nb.client.remote import RemoteCommandError
from gpucloud_nb.errors import GPUCloudError

if TYPE_CHECKING:
    from gpucloud_nb.client.management import GPUCloud

__all__ = ["RemoteUsage", "remote_magic"]

_BIG = 8 * 1024 * 1024


class RemoteUsage(Exception):
    """A usage problem in one sentence."""


def _split(target: str, which: str) -> tuple[str, str]:
    instance, sep, path = target.partition(":")
    if not sep or not instance or not path:
        raise RemoteUsage(f"%gpucloud {which}: write the remote side as INSTANCE:PATH, "
                          f"e.g. my-instance:data.csv; {target!r} was given.")
    return instance, path


def _progress(label: str) -> Callable[[int, int], None]:
    shown = [-1]

    def report(done: int, total: int) -> None:
        if total < _BIG:
            return
        tenth = done * 10 // total
        if tenth != shown[0]:
            shown[0] = tenth
            end = "\n" if done >= total else ""
            print(f"\r{label}: {done / 2**20:.0f} of {total / 2**20:.0f} MB", end=end, flush=True)

    return report


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, add_help=False, allow_abbrev=False,
                                     exit_on_error=False)
    parser.add_argument("instance")
    parser.add_argument("--python", action="store_true")
    parser.add_argument("--timeout", type=float, default=None)
    return parser


def remote_magic(cloud: GPUCloud, line: str, cell: str | None) -> None:
    """Handle ``run``, ``put`` and ``get``; raises :class:`RemoteUsage` or a cloud error."""
    try:
        words = shlex.split(line)
    except ValueError as error:
        raise RemoteUsage(f"%gpucloud: {error} in the arguments; check the quotes.") from None
    verb, rest = words[0], words[1:]
    if verb == "run":
        if cell is None:
            raise RemoteUsage("%gpucloud run runs a cell: write %%gpucloud run INSTANCE on the "
                              "first line of a cell and the commands below it.")
        try:
            args = _parser("%%gpucloud run").parse_args(rest)
        except (argparse.ArgumentError, SystemExit):
            raise RemoteUsage("Usage: %%gpucloud run INSTANCE [--python] [--timeout S].") from None
        _run(cloud, args.instance, cell, python=args.python, timeout=args.timeout)
        return
    if cell is not None:
        raise RemoteUsage(f"%%gpucloud {verb} is a line magic: use %gpucloud {verb} ... alone.")
    if len(rest) != 2:
        shape = "LOCAL INSTANCE:REMOTE" if verb == "put" else "INSTANCE:REMOTE LOCAL"
        raise RemoteUsage(f"Usage: %gpucloud {verb} {shape}.")
    if verb == "put":
        local, (name, remote) = rest[0], _split(rest[1], "put")
        instance = cloud.instances.get(name)
        size = os.path.getsize(local) if os.path.isfile(local) else 0
        cloud.instances.upload(instance.id, local, remote, progress=_progress(f"put {local}"))
        print(f"Copied {local} to {instance.name or instance.id}:{remote} ({size:,} bytes).")
    else:
        (name, remote), local = _split(rest[0], "get"), rest[1]
        instance = cloud.instances.get(name)
        cloud.instances.download(instance.id, remote, local, progress=_progress(f"get {remote}"))
        print(f"Copied {instance.name or instance.id}:{remote} to {local} "
              f"({os.path.getsize(local):,} bytes).")


def _run(cloud: GPUCloud, name: str, cell: str, *, python: bool, timeout: float | None) -> None:
    instance = cloud.instances.get(name)
    label = instance.name or instance.id
    command = f"python3 -u -c {shlex.quote(cell)}" if python else cell
    try:
        result = cloud.instances.run(instance.id, command, timeout=timeout,
                                     on_output=lambda text: print(text, flush=True))
    except KeyboardInterrupt:
        print(f"Interrupted: the cell's process on {label} was stopped.", file=sys.stderr)
        return
    except RemoteCommandError as error:
        if "exit status 127" in str(error):
            raise RemoteCommandError(
                f"A command in the cell was not found on {label} (exit status 127).") from None
        raise
    if result.exit_status != 0:
        raise GPUCloudError(f"The cell exited with status {result.exit_status} on {label}.")
