"""Run every benchmark and print one aligned line per figure.

    $ python -m benchmarks              # every benchmarks/bench_*.py, full sizes
    $ python -m benchmarks --quick      # smaller sizes: a smoke test, not a measurement
    $ python -m benchmarks --only client,import

Each ``benchmarks/bench_*.py`` module has ``run(...) -> list[(name, ours, baseline, ratio,
target)]``; ``ours`` and ``baseline`` are measured in the same run, so the ratio holds on a noisy
machine where the absolute times do not. With ``--quick`` a module is run with its ``QUICK``
keyword arguments (a module-level dict; this file knows those of modules that have none).

Each line shows the figure's name, ours, the baseline, the ratio, the target, the machine's load
(its 1-minute load average when the module ended, ``*`` past one per core: a loaded run, whose
times a shared machine inflated) and a mark:
``PASS`` or ``MISS`` against the target, ``INFO`` for a figure without one, and ``ERROR`` when
the module failed (its traceback goes to stderr). Targets are read as:

- ``<= 1.5x``, ``>= 10x``: the ratio;
- ``<= +150 ms``: ours minus the baseline;
- ``<= 12 per second``, ``<= 200 ms``: ours itself.

Every module runs with ``TMPDIR`` pointed at one folder of this run, removed at its end (the
last line says what was left there), so no run leaves temporary folders behind; a module's
progress lines go to stderr, each ended before the next ``# module: seconds`` line.

Values are printed in the row's unit: a module may give a sixth element (``"s"`` for seconds,
shown in ms; ``"req/s"``; ...); rows of ``bench_frames`` are in seconds. The exit status is 0
even when targets are missed; it is 1 only when a benchmark module failed to run.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import inspect
import math
import os
import pkgutil
import re
import shutil
import sys
import tempfile
import textwrap
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

# Quick sizes of modules that define no QUICK themselves.
KNOWN_QUICK: dict[str, dict[str, Any]] = {
    "bench_frames": {"n": 1_000, "repeat": 2},
}
# Units of modules whose rows have five elements.
KNOWN_UNITS: dict[str, str] = {"bench_frames": "s"}

_TARGET = re.compile(r"\s*(<=|>=|<|>|≤|≥)\s*(\+)?\s*([0-9]*\.?[0-9]+)\s*(.*?)\s*")


def discover(only: Sequence[str] = ()) -> list[str]:
    """Names of the benchmark modules (``bench_*``), sorted; ``only`` keeps those matching."""
    names = sorted(m.name for m in pkgutil.iter_modules([str(HERE)]) if m.name.startswith("bench_"))
    if only:
        names = [n for n in names if any(word in n for word in only)]
    return names


def _value(value: float, unit: str) -> str:
    if not isinstance(value, int | float) or math.isnan(value):
        return "n/a"
    if unit == "s":
        if abs(value) >= 1:
            return f"{value:.3f} s"
        return f"{value * 1e3:.2f} ms" if abs(value) >= 1e-3 else f"{value * 1e6:.1f} µs"
    text = f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"
    return f"{text} {unit}".rstrip()


def verdict(ours: float, baseline: float, ratio: float, target: str, unit: str = "") -> str:
    """``PASS``, ``MISS`` or ``INFO`` (no target, or one this reader does not understand)."""
    match = _TARGET.fullmatch(target or "")
    if not match:
        return "INFO"
    op, plus, number, target_unit = match.groups()
    limit = float(number)
    target_unit = target_unit.strip().lower()
    scale = {"ms": 1e3, "µs": 1e6, "us": 1e6}.get(target_unit, 1.0) if unit == "s" else 1.0
    if target_unit in ("x", "×"):
        value = ratio
    elif plus:
        value = (ours - baseline) * scale
    else:
        value = ours * scale
    if not isinstance(value, int | float) or math.isnan(value):
        return "MISS"
    ok = {"<=": value <= limit, "≤": value <= limit, "<": value < limit,
          ">=": value >= limit, "≥": value >= limit, ">": value > limit}[op]
    return "PASS" if ok else "MISS"


def _run_module(name: str, quick: bool) -> list[tuple[Any, ...]]:
    module = importlib.import_module(f"benchmarks.{name}")
    kwargs: dict[str, Any] = {}
    if quick:
        kwargs = dict(getattr(module, "QUICK", KNOWN_QUICK.get(name, {})))
        if not kwargs and "quick" in inspect.signature(module.run).parameters:
            kwargs = {"quick": True}
    rows = module.run(**kwargs)
    unit = getattr(module, "UNIT", KNOWN_UNITS.get(name, ""))
    return [(*row, unit) if len(row) == 5 else tuple(row) for row in rows]


class _Lines:
    """stderr that remembers whether its last line was ended, so the next progress line starts
    on a line of its own (a module's ``\r`` progress line is left unended)."""

    def __init__(self, stream: Any) -> None:
        self.stream, self.ended = stream, True

    def write(self, text: str) -> int:
        if text:
            self.ended = text.endswith("\n")
        return int(self.stream.write(text))

    def line(self, text: str) -> None:
        self.write(("" if self.ended else "\n") + text + "\n")
        self.flush()

    def flush(self) -> None:
        self.stream.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


def _load() -> str:
    """The 1-minute load average, marked ``*`` when above one per core (a loaded run)."""
    load, cores = os.getloadavg()[0], os.cpu_count() or 1
    return f"{load:.1f}{'*' if load > cores else ''}"


GATEWAY_HOME = "GPUCLOUD_GATEWAY_HOME"


def _stop_gateways(root: str) -> None:
    """Stop the personal gateways the modules started under ``root``."""
    from gpucloud_nb.gateway import personal

    for home in sorted(Path(root).glob("*/")):
        with contextlib.suppress(Exception):
            personal.stop(home)


#: The figure column's width: a longer name wraps onto lines of its own above the one that
#: carries its numbers, so the table stays readable in a terminal.
NAME_WIDTH = 72


def table(lines: Sequence[tuple[str, ...]]) -> list[str]:
    """The table's lines: a header, then each figure's name (wrapped past :data:`NAME_WIDTH`,
    its sub-rows' indent kept), its last line carrying the numbers and ending with the mark.

        >>> print("\\n".join(table([("a figure", "1.00 ms", "2.00 ms", "0.5x", "<= 1x", "0.3",
        ...                            "PASS")])))
        figure    ours     baseline  ratio  target  load  mark
        a figure  1.00 ms   2.00 ms   0.5x  <= 1x    0.3  PASS
    """
    header = ("figure", "ours", "baseline", "ratio", "target", "load", "mark")
    names = []
    for line in lines:
        indent = line[0][:len(line[0]) - len(line[0].lstrip())]
        names.append(textwrap.wrap(line[0], NAME_WIDTH, initial_indent="",
                                   subsequent_indent=indent + "  ", drop_whitespace=True)
                     or [""])
        names[-1][0] = indent + names[-1][0].lstrip()
    widths = [max(len(line[i]) for line in [header, *lines]) for i in range(7)]
    widths[0] = max(len(part) for wrapped in [["figure"], *names] for part in wrapped)
    out = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip()]
    for line, wrapped in zip(lines, names, strict=True):
        out.extend(wrapped[:-1])
        cells = [wrapped[-1].ljust(widths[0]), line[1].rjust(widths[1]), line[2].rjust(widths[2]),
                 line[3].rjust(widths[3]), line[4].ljust(widths[4]), line[5].rjust(widths[5]),
                 line[6]]
        out.append("  ".join(cells).rstrip())
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke test")
    parser.add_argument("--only", default="", metavar="NAMES",
                        help="comma-separated parts of module names to run, e.g. client,import")
    args = parser.parse_args(argv)
    only = [word.strip() for word in args.only.split(",") if word.strip()]
    names = discover(only)
    if not names:
        print("no benchmark modules matched", file=sys.stderr)
        return 1

    lines: list[tuple[str, str, str, str, str, str, str]] = []
    failed = False
    started = time.perf_counter()
    errors = _Lines(sys.stderr)
    scratch = tempfile.mkdtemp(prefix="gpucloud-bench-run-")
    saved = os.environ.get("TMPDIR"), tempfile.tempdir
    os.environ["TMPDIR"], tempfile.tempdir = scratch, scratch  # subprocesses inherit TMPDIR
    # Personal gateways the modules start (through connect(), in kernels) live in this run's
    # folder too, not in the user's data dir, and are stopped with it.
    gateways = saved_gateways = os.environ.get(GATEWAY_HOME)
    if gateways is None:
        gateways = os.environ[GATEWAY_HOME] = os.path.join(scratch, "gateways")
    sys.stderr = errors
    try:
        for name in names:
            module_start = time.perf_counter()
            try:
                rows = _run_module(name, args.quick)
            except Exception:
                failed = True
                errors.line(traceback.format_exc().rstrip())
                lines.append((f"{name}: failed (see stderr)", "-", "-", "-", "-", _load(),
                              "ERROR"))
                continue
            load = _load()
            for figure, ours, baseline, ratio, target, unit in rows:
                lines.append((str(figure), _value(ours, unit), _value(baseline, unit),
                              f"{ratio:.3g}x" if isinstance(ratio, int | float) else str(ratio),
                              str(target or "-"), load,
                              verdict(ours, baseline, ratio, str(target or ""), unit)))
            errors.line(f"# {name}: {time.perf_counter() - module_start:.1f} s, load {load}")
    finally:
        sys.stderr = errors.stream
        if saved_gateways is None:
            _stop_gateways(gateways)
            os.environ.pop(GATEWAY_HOME)
        left = sorted(name for name in os.listdir(scratch) if name != "gateways")
        shutil.rmtree(scratch, ignore_errors=True)
        os.environ.pop("TMPDIR")
        if saved[0] is not None:
            os.environ["TMPDIR"] = saved[0]
        tempfile.tempdir = saved[1]

    for row in table(lines):
        print(row)
    marks = [line[6] for line in lines]
    print(f"\n{marks.count('PASS')} pass, {marks.count('MISS')} miss, {marks.count('INFO')} info, "
          f"{marks.count('ERROR')} error; {time.perf_counter() - started:.0f} s on "
          f"{os.cpu_count()} cores{' (quick sizes)' if args.quick else ''}; load * = a loaded run")
    print(f"temporary files the modules left in this run's folder (removed with it): "
          f"{', '.join(left[:8]) + (' ...' if len(left) > 8 else '') if left else 'none'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
