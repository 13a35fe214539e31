"""Benchmark: the cost of ``import gpucloud_nb`` against importing its big dependencies alone.

Each import is timed inside a fresh interpreter (``python -c``; the interpreter's own start-up is
left out by timing the ``import`` statement with ``time.perf_counter``), ``repeat`` times,
alternating ours and the baseline; the best of each counts.

- ``import gpucloud_nb`` against ``import pandas, ipywidgets, httpx, PIL.Image`` (what a
  notebook using the package loads anyway). Target: at most 150 ms more (``<= +150 ms``).
- ``import gpucloud_nb, gpucloud_nb.widgets, gpucloud_nb.magics`` against the same dependencies
  plus ``IPython``: the cost of the whole notebook surface. Same target.

A test (``tests/test_benchmarks.py``) checks the structural side: none of ``starlette``,
``uvicorn``, ``pocketsphinx`` or ``gpucloud_nb.sandbox`` is imported by these imports.
Run standalone with ``python -m benchmarks.bench_import`` (``-X importtime`` detail with
``--detail``).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

__all__ = ["QUICK", "UNIT", "import_seconds", "run"]

Row = tuple[str, float, float, float, str]
UNIT = "s"
QUICK = {"repeat": 1, "warm": False}
ROOT = Path(__file__).resolve().parents[1]

BASELINE = "pandas, ipywidgets, httpx, PIL.Image"
CASES = [
    ("import gpucloud_nb", "gpucloud_nb", BASELINE),
    ("import gpucloud_nb + .widgets + .magics", "gpucloud_nb, gpucloud_nb.widgets, gpucloud_nb.magics",
     f"{BASELINE}, IPython"),
]


def import_seconds(modules: str) -> float:
    """Seconds that ``import <modules>`` takes in a fresh interpreter."""
    code = (
        "import time\n"
        "start = time.perf_counter()\n"
        f"import {modules}\n"
        "print(time.perf_counter() - start)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            cwd=ROOT, check=True, timeout=120)
    return float(result.stdout.strip().splitlines()[-1])


def run(repeat: int = 7, warm: bool = True) -> list[Row]:
    """Rows (name, ours, baseline, ours/baseline, target); times in seconds."""
    rows: list[Row] = []
    for name, ours_modules, base_modules in CASES:
        if warm:  # the file-system cache and the .pyc files
            import_seconds(ours_modules)
            import_seconds(base_modules)
        ours = base = float("inf")
        for _ in range(repeat):
            ours = min(ours, import_seconds(ours_modules))
            base = min(base, import_seconds(base_modules))
        rows.append((f"{name} vs import {base_modules.replace('PIL.Image', 'PIL')} (best of {repeat})",
                     ours, base, ours / base, "<= +150 ms"))
    return rows


def main() -> None:
    if "--detail" in sys.argv:
        subprocess.run([sys.executable, "-X", "importtime", "-c", "import gpucloud_nb"], cwd=ROOT)
        return
    for name, ours, baseline, _ratio, target in run():
        print(f"{name}: ours {ours * 1e3:.0f} ms, baseline {baseline * 1e3:.0f} ms, "
              f"difference {(ours - baseline) * 1e3:+.0f} ms, target {target}")


if __name__ == "__main__":
    main()
