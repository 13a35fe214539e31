"""Checkpoint, restore and move a notebook's variables, called in the kernel itself.

    >>> from gpucloud_nb.kernel import checkpoint, restore, move
    >>> checkpoint()                     # doctest: +SKIP
    >>> restore()                        # the newest checkpoint, into this kernel  # doctest: +SKIP
    >>> move(gpu="H100", max_price=3)    # doctest: +SKIP

``%gpucloud checkpoint``, ``restore`` and ``move`` (:mod:`gpucloud_nb.magics_move`) call these.
In a kernel that gpucloud-nb's provisioner runs on an instance, the namespace is saved on the
instance (:mod:`~gpucloud_nb.kernel.namespace`) and the provisioner, asked over the kernel's
relay (:mod:`~gpucloud_nb.kernel.agent`), carries the bytes (:mod:`~gpucloud_nb.kernel.move`).
In any other kernel, checkpoints are files of this machine and restore reads them here.

Choices (the issue leaves them open):

- **Where checkpoints go.** ``.gpucloud/checkpoints/`` in the notebook's folder (the kernel's
  working folder when no provisioner runs it), one ``<UTC time>-<instance>.gpucloud`` file each;
  the newest ``keep`` (default 5) are kept. The folder is hidden, so the notebook's folder copy
  never sends checkpoints back to an instance.
- **The size limit.** A move or checkpoint larger than ``GPUCLOUD_MOVE_LIMIT_GB`` (default 20
  GB), or the ``limit_gb=`` given, is refused before anything is written, with the size and
  how to raise the limit.
- **A lost instance** (deleted, failed, or unreachable over SSH for the provisioner's
  ``lost_after``): the provisioner says once, at WARNING on the kernel manager's log, one
  sentence: the instance, what happened to it, the newest checkpoint and the exact line to
  run, e.g. ``Instance box (id) was deleted from outside this notebook, so its kernel and
  variables are gone; to launch an instance like it and restore checkpoint 20261128T1502…-box
  (3 min old), run %gpucloud restore 20261128T1502…-box --gpu 'L4 24GB' in a kernel on another
  instance.`` (``provisioner.lost`` holds it.) A stand-in then answers in the kernel's place
  (:mod:`gpucloud_nb.kernel.standin`), so the next cell's only output is that sentence, under
  JupyterLab, nbclient (a ``CellExecutionError``) or a plain ``KernelManager`` alike.
- **Background checkpoints**: :mod:`gpucloud_nb.kernel.background`.
- **The sidebar's Restore button** restores the lost kernel itself
  (:mod:`gpucloud_nb.kernel.revive`). **Not yet**: ``%gpucloud restore`` run in the stand-in
  itself (the sentence says to run it in a kernel on another instance).
- **Restore is all or nothing on a move** (a name that cannot be restored there keeps the
  session where it is); a restore into this kernel brings every name it can and names the
  others.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gpucloud_nb.errors import GPUCloudError, InvalidInputError
from gpucloud_nb.kernel import agent, namespace

__all__ = ["CHECKPOINTS", "LIMIT_VARIABLE", "MovedError", "Outcome", "checkpoint", "checkpoints", "human",
           "move", "restore", "restore_file"]

CHECKPOINTS = Path(".gpucloud") / "checkpoints"
LIMIT_VARIABLE = "GPUCLOUD_MOVE_LIMIT_GB"
DEFAULT_LIMIT_GB = 20.0
DEFAULT_KEEP = 5
SUFFIX = ".gpucloud"


def human(size: float) -> str:
    """Bytes as people read them.

        >>> human(1234), human(200 * 2**20), human(3 * 2**30)
        ('1.2 kB', '210 MB', '3.2 GB')
    """
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size >= scale:
            value = size / scale
            return f"{value:.1f} {unit}" if value < 10 else f"{value:.0f} {unit}"
    return f"{int(size)} B"


@dataclass
class Outcome:
    """What a checkpoint, restore or move did, as the cell printed it."""

    ok: bool
    text: str
    names: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    path: str = ""

    def __repr__(self) -> str:
        return self.text


def _shell() -> Any:
    from IPython import get_ipython

    shell = get_ipython()
    if shell is None:
        raise InvalidInputError("Checkpoints and moves work in a notebook kernel.")
    return shell


def _limit(limit_gb: float | None) -> float:
    if limit_gb is not None:
        return float(limit_gb) * 1e9
    try:
        return float(os.environ.get(LIMIT_VARIABLE) or DEFAULT_LIMIT_GB) * 1e9
    except ValueError:
        return DEFAULT_LIMIT_GB * 1e9


def _prepared(limit_gb: float | None, what: str) -> namespace.Prepared:
    shell = _shell()
    prepared = namespace.prepare(shell.user_ns, shell.user_ns_hidden)
    if prepared.size > _limit(limit_gb):
        raise InvalidInputError(
            f"The namespace is {human(prepared.size)}, above the {human(_limit(limit_gb))} limit "
            f"for a {what}; raise it with --limit-gb (or {LIMIT_VARIABLE}), or del large "
            "variables first.")
    return prepared


def _listing(prepared: namespace.Prepared) -> str:
    sizes = prepared.sizes()
    shown = ", ".join(f"{name} ({human(size)})" for name, size in
                      sorted(sizes.items(), key=lambda item: -item[1])[:12])
    more = f" and {len(sizes) - 12} more" if len(sizes) > 12 else ""
    return shown + more if shown else "nothing"


def _not_moved(skipped: dict[str, str]) -> str:
    if not skipped:
        return ""
    return " Not saved: " + "; ".join(f"{name} ({why})" for name, why in skipped.items()) + "."


def _scratch() -> str:
    """A file beside the kernel's connection file, for the namespace on its way."""
    connection = agent.connection_file()
    folder = os.path.dirname(connection) or os.getcwd()
    return os.path.join(folder, f"gpucloud-ns-{os.getpid()}-{time.time_ns()}{SUFFIX}")


def _home(path: str) -> str:
    """``path`` relative to the home folder, as the provisioner's SFTP sees it (a sandbox
    instance's SFTP shows its home as ``/``)."""
    return os.path.relpath(path, os.path.expanduser("~"))


def checkpoints(folder: str | os.PathLike[str] | None = None) -> list[Path]:
    """The checkpoints in ``folder`` (default: this folder's), oldest first."""
    where = Path(folder) if folder is not None else Path.cwd() / CHECKPOINTS
    return sorted(where.glob(f"*{SUFFIX}")) if where.is_dir() else []


def prune(folder: Path, keep: int) -> None:
    """Keep the newest ``keep`` checkpoints of ``folder``."""
    for old in checkpoints(folder)[:-keep or None] if keep > 0 else []:
        old.unlink(missing_ok=True)


def stamp(label: str) -> str:
    """A checkpoint's file name: UTC time first (so names sort by age), then ``label``."""
    now = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in label) or "kernel"
    return f"{now}-{safe}{SUFFIX}"


def checkpoint(*, keep: int = DEFAULT_KEEP, limit_gb: float | None = None,
               say: Callable[[str], None] = print,
               guard: Callable[[], AbstractContextManager[Any]] = nullcontext) -> Outcome:
    """Save this kernel's variables to the notebook's folder, ``.gpucloud/checkpoints/``.

    ``guard()`` is held while the variables are read and written to a file, not while the
    file is copied (:mod:`gpucloud_nb.kernel.background` holds cells back with it)."""
    if keep < 1:
        raise InvalidInputError("keep must be at least 1.")
    started = time.monotonic()
    relay = agent.relay_path()
    if relay is None:
        folder = Path.cwd() / CHECKPOINTS
        path = folder / stamp("local")
        with guard():
            prepared = _prepared(limit_gb, "checkpoint")
            prepared.write(path)
        prune(folder, keep)
        text = (f"Checkpoint {path.name}: {len(prepared.names)} names, {human(prepared.size)} "
                f"in {time.monotonic() - started:.1f} s: {_listing(prepared)}."
                f"{_not_moved(prepared.skipped)}")
        say(text)
        return Outcome(True, text, prepared.names, prepared.skipped, str(path))
    scratch = _scratch()
    try:
        with guard():
            prepared = _prepared(limit_gb, "checkpoint")
            say(f"Saving {len(prepared.names)} names ({human(prepared.size)}) to this machine…")
            prepared.write(scratch)
        saved = time.monotonic() - started
        answer = agent.ask({"op": "checkpoint", "file": _home(scratch), "keep": keep,
                            "size": os.path.getsize(scratch)}, say, relay)
    finally:
        Path(scratch).unlink(missing_ok=True)
    text = str(answer.get("text") or "")
    if answer.get("ok"):
        text = (f"{text} {len(prepared.names)} names (saved in {saved:.1f} s): "
                f"{_listing(prepared)}.{_not_moved(prepared.skipped)}")
    say(text)
    return Outcome(bool(answer.get("ok")), text, prepared.names, prepared.skipped,
                   str(answer.get("path") or ""))


def restore_file(path: str, *, strict: bool = False, remove: bool = False) -> dict[str, Any]:
    """Load the namespace file ``path`` into this kernel; a report (names, failed, notes).

    With ``strict``, nothing is set unless every name can be restored (a move).
    """
    started = time.monotonic()
    try:
        loaded = namespace.load(path, into=_shell().user_ns)
    finally:
        if remove:
            Path(path).unlink(missing_ok=True)
    if not (strict and loaded.failed):
        _shell().user_ns.update(loaded.values)
    return {"names": sorted(loaded.values), "failed": loaded.failed, "skipped": loaded.skipped,
            "notes": loaded.notes, "seconds": time.monotonic() - started,
            "size": sum(loaded.sizes.values())}


def _restored(report: dict[str, Any], where: str) -> str:
    failed = report.get("failed") or {}
    text = (f"Restored {len(report['names'])} names ({human(report.get('size') or 0)}) {where} "
            f"in {report['seconds']:.1f} s.")
    if failed:
        text += " Could not restore: " + "; ".join(f"{n} ({why})" for n, why in failed.items())
        text += "."
    for note in report.get("notes") or []:
        text += f" Note: {note}."
    return text


def restore(checkpoint: str | None = None, target: str | None = None, *,
            gpu: str | None = None, max_price: float | None = None,
            say: Callable[[str], None] = print) -> Outcome:
    """Restore a checkpoint (default: the newest) into this kernel, or onto ``target``.

    With a ``target`` (an instance name or id) or offer filters (``gpu``, ``max_price``), the
    kernel moves there first and the checkpoint is restored in the new kernel: the way back
    after a lost instance.
    """
    relay = agent.relay_path()
    if target is not None or gpu is not None or max_price is not None:
        if relay is None:
            raise agent.NoProvisionerError(
                "Restoring onto another instance needs a kernel started by gpucloud-nb's "
                "provisioner; restore into this kernel with %gpucloud restore CHECKPOINT.")
        answer = agent.ask({"op": "move", "checkpoint": checkpoint or "", "target": target,
                            "gpu": gpu, "max_price": max_price, "keep": True,
                            "msg_id": _cell_id(), "extensions": _extensions()}, say, relay)
        say(str(answer.get("text")))
        return Outcome(bool(answer.get("ok")), str(answer.get("text")))
    if relay is None:
        found = _local_checkpoint(checkpoint)
        report = restore_file(str(found))
        text = f"{found.name}: " + _restored(report, "into this kernel")
        say(text)
        return Outcome(not report["failed"], text, report["names"])
    answer = agent.ask({"op": "fetch", "checkpoint": checkpoint or ""}, say, relay)
    if not answer.get("ok"):
        say(str(answer.get("text")))
        return Outcome(False, str(answer.get("text")))
    report = restore_file(os.path.join(os.path.expanduser("~"), str(answer["file"])),
                          remove=True)
    text = f"{answer.get('name')}: " + _restored(report, "into this kernel")
    say(text)
    return Outcome(not report["failed"], text, report["names"])


def _local_checkpoint(name: str | None) -> Path:
    found = checkpoints()
    if not found:
        raise InvalidInputError(f"There is no checkpoint in {Path.cwd() / CHECKPOINTS}; make one "
                                "with %gpucloud checkpoint.")
    if not name:
        return found[-1]
    matches = [path for path in found if name in path.name]
    if not matches:
        raise InvalidInputError(f"No checkpoint matches {name!r}; there are: "
                                f"{', '.join(path.name for path in found[-5:])}.")
    return matches[-1]


def _cell_id() -> str:
    shell = _shell()
    kernel = getattr(shell, "kernel", None)
    try:
        parent = kernel.get_parent("shell") if kernel is not None else {}
    except TypeError:  # ipykernel before 6.0 took no channel
        parent = kernel.get_parent() if kernel is not None else {}
    return str(((parent or {}).get("header") or {}).get("msg_id") or "")


def _extensions() -> list[str]:
    manager = getattr(_shell(), "extension_manager", None)
    return sorted(getattr(manager, "loaded", ()) or ())


def move(target: str | None = None, *, gpu: str | None = None, max_price: float | None = None,
         keep: bool = False, limit_gb: float | None = None,
         say: Callable[[str], None] = print) -> Outcome:
    """Move this kernel, with its variables, to the instance ``target`` (a name or id), or to a
    new instance from the cheapest offer that fits ``gpu`` and ``max_price`` ($/h).

    The old instance is deleted once the new kernel holds the variables, unless ``keep``. Any
    failure leaves this kernel running here with its variables, and says so.
    """
    if target is None and gpu is None and max_price is None:
        raise InvalidInputError("Say where to move: an instance name or id, or --gpu MODEL "
                                "and/or --max-price DOLLARS for a new instance.")
    relay = agent.relay_path()
    if relay is None:
        raise agent.NoProvisionerError(
            "This kernel does not run on an instance through gpucloud-nb's kernel provisioner, "
            "so it cannot move; install one with %gpucloud kernel NAME and switch to it.")
    started = time.monotonic()
    prepared = _prepared(limit_gb, "move")
    say(f"Moving {len(prepared.names)} names, {human(prepared.size)}: {_listing(prepared)}."
        f"{_not_moved(prepared.skipped).replace('Not saved', 'Cannot move')}")
    scratch = _scratch()
    try:
        prepared.write(scratch)
        say(f"  saved here in {time.monotonic() - started:.1f} s")
        answer = agent.ask({"op": "move", "file": _home(scratch), "target": target, "gpu": gpu,
                            "max_price": max_price, "keep": keep, "msg_id": _cell_id(),
                            "size": os.path.getsize(scratch), "extensions": _extensions()},
                           say, relay)
    except KeyboardInterrupt:
        say("Interrupted: the move stopped, and this kernel still runs here with its variables.")
        return Outcome(False, "interrupted", prepared.names, prepared.skipped)
    finally:
        Path(scratch).unlink(missing_ok=True)
    text = str(answer.get("text") or "")
    say(text)
    if answer.get("ok"):
        _refuse_further_cells(str(answer.get("where") or "the new instance"))
    return Outcome(bool(answer.get("ok")), text, prepared.names, prepared.skipped)


class MovedError(GPUCloudError):
    """A cell reached the old kernel after its session moved away."""

    def _render_traceback_(self) -> list[str]:  # IPython shows this one line, no traceback
        return [str(self)]


def _refuse_further_cells(where: str) -> None:
    """Make every later cell in this (old) kernel fail with one sentence, so a cell queued
    behind the move (Run All) never runs here, and the queue behind it is aborted."""
    shell = _shell()
    sentence = (f"This cell reached the old kernel while the session moved to {where}; run it "
                "again, and it runs there.")

    def refuse(lines: list[str]) -> list[str]:
        return [f"raise __import__('gpucloud_nb.kernel.session', fromlist=['MovedError'])"
                f".MovedError({sentence!r})\n"]

    shell.input_transformers_cleanup.append(refuse)
