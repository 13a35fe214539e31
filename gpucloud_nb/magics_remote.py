"""``%%gpucloud run`` and ``%gpucloud put/get``: use an instance over SSH from notebook cells.

    %%gpucloud run my-instance
    nvidia-smi

    %%gpucloud run my-instance --python
    import platform; print(platform.node())

    %gpucloud put data.csv my-instance:data.csv
    %gpucloud get my-instance:results.csv results.csv
    %gpucloud get my-instance:results.csv results.csv --force

``INSTANCE`` is an instance's name or its ``_id``, resolved by ``cloud.instances.get`` (see
:mod:`gpucloud_nb.client.instances`). The cell
runs as a shell script (``--python``: with ``python3``); its output streams into the cell as it
comes. Interrupting the kernel stops the remote process; ``--timeout S`` stops it after S
seconds. A non-zero exit status, like every other failure, is one line on stderr; nothing
returns a value.

- **What the cell shows.** At most ``LINES_PER_SECOND`` lines a second are printed (a flood such
  as ``yes`` would otherwise freeze the notebook); the rest are counted and one line at the end
  says how many were not shown; a line is cut after ``LINE_CHARS_SHOWN`` characters, saying
  how many more it had. Every line is shown as text: terminal control sequences (colours,
  cursor moves, OSC titles and clipboard writes) are removed, a carriage return keeps what a
  terminal would leave (the text after it), and other control characters and undecodable bytes
  are shown escaped (``\\x07``, ``\\xff``).
- **The result.** The run's :class:`~gpucloud_nb.client.remote.RunResult` (the last 10 MiB of
  each stream) is kept in the shell as ``_gpucloud_run``; with ``--nodes``, the list of them.
- **Several nodes.** ``%%gpucloud run --nodes NAME1,NAME2,…`` runs the cell on every node at
  once (:meth:`~gpucloud_nb.client.instances.Instances.run_all`), with ``GPUCLOUD_NODE_RANK``,
  ``GPUCLOUD_NUM_NODES``, ``GPUCLOUD_NODE_IPS`` and ``MASTER_ADDR``/``MASTER_PORT`` set; each
  line shows ``[rank]`` first, and every node that exits non-zero is named in one line.
- **get** never replaces an existing local file unless ``--force`` is given (as ``cp -n``).
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from gpucloud_nb.client.run_output import RunResult
from gpucloud_nb.errors import GPUCloudError, RemoteCommandError

if TYPE_CHECKING:
    from gpucloud_nb.client.management import GPUCloud

__all__ = ["LINES_PER_SECOND", "LINE_CHARS_SHOWN", "RemoteUsage", "printable", "remote_magic"]

_BIG = 8 * 1024 * 1024
LINES_PER_SECOND = 200
"""The most lines ``%%gpucloud run`` prints into a cell in one second."""
LINE_CHARS_SHOWN = 2000
"""The most characters of one line ``%%gpucloud run`` prints (the rest is counted)."""

# ESC sequences: CSI (ESC [ or 0x9b), OSC/DCS/SOS/PM/APC strings up to BEL or ST (or the line's
# end), then any other two-character escape.
_CONTROL = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]?"
    r"|(?:\x1b[\]PX^_]|[\x9d\x90\x98\x9e\x9f])[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"
    r"|\x1b[ -~]?")
_INVISIBLE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def printable(line: str) -> str:
    """``line`` as plain text for a cell: no terminal control sequences, other controls escaped.

        >>> printable("\\x1b]0;pwned\\x07\\x1b[31mred\\x1b[0m and\\x07 \\x1b[2Jbell")
        'red and\\\\x07 bell'
        >>> printable("50%\\r100%\\r")
        '100%'
    """
    line = line.rstrip("\r")
    if "\r" in line:
        line = line.rsplit("\r", 1)[1]
    line = _CONTROL.sub("", line)
    return _INVISIBLE.sub(lambda match: f"\\x{ord(match.group()):02x}"
                          if ord(match.group()) < 0x100 else f"\\u{ord(match.group()):04x}", line)


class _Shown:
    """Prints lines into the cell, at most ``LINES_PER_SECOND`` a second; counts the rest."""

    def __init__(self) -> None:
        self.window = time.monotonic()
        self.in_window = 0
        self.hidden = 0

    def __call__(self, line: str) -> None:
        now = time.monotonic()
        if now - self.window >= 1.0:
            self.window, self.in_window = now, 0
        if self.in_window >= LINES_PER_SECOND:
            self.hidden += 1
            return
        self.in_window += 1
        shown = printable(line)
        if len(shown) > LINE_CHARS_SHOWN:
            extra = len(shown) - LINE_CHARS_SHOWN
            shown = f"{shown[:LINE_CHARS_SHOWN]} … ({extra:,} more characters)"
        print(shown, flush=True)

    def summary(self, result: RunResult | None) -> None:
        if not self.hidden:
            return
        where = "." if result is None else (
            "; the last 10 MiB of each stream is in _gpucloud_run.stdout and .stderr.")
        print(f"… {self.hidden:,} lines not shown{where}", flush=True)


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
    parser.add_argument("instance", nargs="?")
    parser.add_argument("--nodes", default=None)
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
            args = None
        if args is None or (args.instance is None) == (args.nodes is None):
            raise RemoteUsage("Usage: %%gpucloud run INSTANCE [--python] [--timeout S], or "
                              "%%gpucloud run --nodes NAME1,NAME2,… [--python] [--timeout S].")
        if args.nodes is not None:
            _run_nodes(cloud, args.nodes, cell, python=args.python, timeout=args.timeout)
        else:
            _run(cloud, args.instance, cell, python=args.python, timeout=args.timeout)
        return
    if cell is not None:
        raise RemoteUsage(f"%%gpucloud {verb} is a line magic: use %gpucloud {verb} ... alone.")
    force = verb == "get" and "--force" in rest
    rest = [word for word in rest if not (force and word == "--force")]
    if len(rest) != 2:
        shape = "LOCAL INSTANCE:REMOTE" if verb == "put" else "INSTANCE:REMOTE LOCAL [--force]"
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
        cloud.instances.download(instance.id, remote, local, progress=_progress(f"get {remote}"),
                                 overwrite=force)
        print(f"Copied {instance.name or instance.id}:{remote} to {local} "
              f"({os.path.getsize(local):,} bytes).")


def _run(cloud: GPUCloud, name: str, cell: str, *, python: bool, timeout: float | None) -> None:
    instance = cloud.instances.get(name)
    label = instance.name or instance.id
    command = f"python3 -u -c {shlex.quote(cell)}" if python else cell
    shown = _Shown()
    try:
        result = cloud.instances.run(instance.id, command, timeout=timeout, on_output=shown)
    except KeyboardInterrupt:
        shown.summary(None)
        print(f"Interrupted: the cell's process on {label} was stopped.", file=sys.stderr)
        return
    except RemoteCommandError as error:
        shown.summary(None)
        if "exit status 127" in str(error):
            raise RemoteCommandError(
                f"A command in the cell was not found on {label} (exit status 127).") from None
        raise
    _keep(result)
    shown.summary(result)
    if result.exit_status != 0:
        raise GPUCloudError(f"The cell exited with status {result.exit_status} on {label}.")


def _run_nodes(cloud: GPUCloud, nodes: str, cell: str, *, python: bool,
               timeout: float | None) -> None:
    """``--nodes``: the cell on every node at once, each line prefixed ``[rank]``."""
    names = [name.strip() for name in nodes.split(",")]
    if not all(names):
        raise RemoteUsage(f"--nodes takes instance names or ids separated by commas, e.g. "
                          f"--nodes train-0,train-1; {nodes!r} was given.")
    instances = [cloud.instances.get(name) for name in names]
    labels = [instance.name or instance.id for instance in instances]
    command = f"python3 -u -c {shlex.quote(cell)}" if python else cell
    shown = _Shown()
    try:
        results = cloud.instances.run_all([i.id for i in instances], command, timeout=timeout,
                                          on_output=shown)
    except KeyboardInterrupt:
        shown.summary(None)
        print(f"Interrupted: the cell's processes on {', '.join(labels)} were stopped.",
              file=sys.stderr)
        return
    _keep(results)
    shown.summary(results[0])
    failed = [(rank, r.exit_status) for rank, r in enumerate(results) if r.exit_status != 0]
    if failed:
        said = ", ".join(f"{status} on node {rank} ({labels[rank]})" for rank, status in failed)
        raise GPUCloudError(f"The cell exited with status {said}.")


def _keep(result: RunResult | list[RunResult]) -> None:
    """Keep ``result`` in the shell as ``_gpucloud_run`` (when there is a shell)."""
    from IPython import get_ipython

    shell = get_ipython()
    if shell is not None:
        shell.user_ns["_gpucloud_run"] = result
