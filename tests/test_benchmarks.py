"""The benchmarks run (``python -m benchmarks --quick``), and importing the package stays light.

No timing is asserted here: the machine is shared and noisy. The smoke test checks that every
benchmark module runs and prints one marked line per figure; the import test checks, in a fresh
interpreter, which modules the package's imports load.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MARKS = ("PASS", "MISS", "INFO")
# the server stack and the speech model load only when a sandbox starts
NEVER_ON_IMPORT = ("starlette", "uvicorn", "pocketsphinx", "gpucloud_nb.sandbox")


def _modules_after(*imports: str) -> set[str]:
    code = "import json, sys\n" + "".join(f"import {m}\n" for m in imports) + \
        "print(json.dumps(sorted(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            cwd=REPO, check=True, timeout=120)
    return set(json.loads(result.stdout))


def _present(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def test_importing_the_package_loads_no_server_stack() -> None:
    imports = ["gpucloud_nb"] + [m for m in ("gpucloud_nb.widgets", "gpucloud_nb.magics")
                                 if _present(m)]
    loaded = _modules_after(*imports)
    assert "gpucloud_nb" in loaded
    found = sorted(m for m in loaded
                   if any(m == bad or m.startswith(bad + ".") for bad in NEVER_ON_IMPORT))
    assert not found, f"import {', '.join(imports)} loaded {found}"


def test_the_bare_package_loads_no_notebook_stack() -> None:
    loaded = _modules_after("gpucloud_nb")
    found = sorted(m for m in ("pandas", "ipywidgets", "IPython", *NEVER_ON_IMPORT) if m in loaded)
    assert not found, f"import gpucloud_nb loaded {found}"


def _figures(stdout: str) -> list[str]:
    """The table's figures, each one line: a name wrapped onto lines of its own is joined to
    the line that carries its numbers and mark."""
    summary = re.compile(r"^\d+ pass, \d+ miss, \d+ info, \d+ error|^temporary files ")
    figures, head = [], ""
    for line in stdout.splitlines()[1:]:
        if not line.strip() or summary.match(line):
            continue
        if line.rstrip().endswith((*MARKS, "ERROR")):
            figures.append(f"{head} {line.strip()}" if head else line)
            head = ""
        else:
            head = f"{head} {line.strip()}".strip()
    assert not head, f"a wrapped name has no line with its numbers: {head!r}"
    return figures


def test_the_table_wraps_long_names_and_keeps_each_figures_numbers_on_one_line() -> None:
    from benchmarks.__main__ import NAME_WIDTH, table

    long = "  " + " ".join(["a long figure name"] * 12) + " [load 13.2]"
    out = table([("short", "1.00 ms", "2.00 ms", "0.5x", "<= 1x", "0.3", "PASS"),
                 (long, "104.04 ms", "162.81 ms", "0.64x", "-", "13.2*", "INFO")])
    assert out[0].split() == ["figure", "ours", "baseline", "ratio", "target", "load", "mark"]
    assert max(map(len, out)) < NAME_WIDTH + 60  # was the long name's length plus the cells
    assert out[-1].endswith("INFO") and "104.04 ms" in out[-1] and "[load 13.2]" in out[-1]
    wrapped = out[2:-1]
    assert wrapped and all(line.startswith("  ") and not line.endswith(MARKS) for line in wrapped)
    assert " ".join(line.strip() for line in out[2:]).startswith(long.strip())
    assert _figures("\n".join(out)) == [out[1], " ".join(line.strip() for line in out[2:])]
    # the numbers' columns line up
    assert out[1].index("1.00 ms") + len("1.00 ms") == out[-1].index("104.04 ms") + len("104.04 ms")


@pytest.mark.slow
@pytest.mark.timeout(600)  # it starts kernels and instances: minutes on a loaded machine
def test_quick_benchmarks_print_one_marked_line_per_figure(tmp_path: Path) -> None:
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    result = subprocess.run([sys.executable, "-m", "benchmarks", "--quick"], capture_output=True,
                            text=True, cwd=REPO, timeout=560,
                            env={**os.environ, "TMPDIR": str(temporary)})
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert list(temporary.iterdir()) == []  # no temporary folder left behind
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["figure", "ours", "baseline", "ratio", "target", "load", "mark"]
    figures = _figures(result.stdout)
    assert figures, result.stdout
    for line in figures:
        assert line.rstrip().endswith(MARKS), line
        assert re.search(r"\d", line), line
    text = "\n".join(figures)
    expected = ["offers_frame", "instances.list()", "launches", "import gpucloud_nb",
                "image_data_url", "sandbox GET /gpu-cloud/instances"]
    if (REPO / "benchmarks" / "bench_chat.py").exists():
        expected.append("chat")
    for name in expected:
        assert name in text, f"no figure for {name!r}:\n{result.stdout}"
    modules = sorted(p.stem for p in (REPO / "benchmarks").glob("bench_*.py"))
    assert len(figures) >= len(modules)
    assert re.search(r"^\d+ pass, \d+ miss, \d+ info, 0 error", result.stdout, re.M), result.stdout
    # stderr: one progress line per module, each on a line of its own; no profiler dumps
    assert "function calls" not in result.stderr and "Ordered by" not in result.stderr
    progress = re.findall(r"# bench_\w+: [\d.]+ s, load [\d.]+\*?", result.stderr)
    assert len(progress) == len(modules), result.stderr[-3000:]
    for found in progress:
        assert f"\n{found}\n" in f"\n{result.stderr}", found


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_quick_gateway_benchmark_prints_its_table_with_load_and_leaves_no_folder(
        tmp_path: Path) -> None:
    # A temporary folder of its own: another run's benchmark (a second full run on the same
    # machine) makes and removes folders of the same name in the shared one meanwhile.
    result = subprocess.run([sys.executable, "-m", "benchmarks", "--quick", "--only", "gateway"],
                            capture_output=True, text=True, cwd=REPO, timeout=230,
                            env={**os.environ, "TMPDIR": str(tmp_path)})
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["figure", "ours", "baseline", "ratio", "target", "load", "mark"]
    figures = _figures(result.stdout)
    for name in ("gateway list p50", "gateway get p50", "proxy (Starlette + httpx) list p50",
                 "students, each every", "CPU per list/get", "CPU per create",
                 "gateway create p99", "the upstream 10 ms away", "admission itself"):
        line = next((line for line in figures if name in line), None)
        assert line is not None, f"no figure for {name!r}:\n{result.stdout}"
        assert re.search(r"\[load \d+\.\d\]", line), line
        assert re.search(r"\d+\.\d+ (ms|µs|s)\b", line), line
    assert re.search(r"^\d+ pass, \d+ miss, \d+ info, 0 error", result.stdout, re.M), result.stdout
    assert list(tmp_path.glob("gpucloud-bench-gateway-*")) == []


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_benchmark_run_by_hand_leaves_no_personal_gateway_in_the_users_data_dir(
        tmp_path: Path) -> None:
    """``bench_session`` starts kernels whose ``connect()`` starts a personal gateway: without
    ``GPUCLOUD_GATEWAY_HOME`` (a run by hand) it lives in the run's folder and stops with it."""
    data = tmp_path / "data"
    env = {k: v for k, v in os.environ.items() if k != "GPUCLOUD_GATEWAY_HOME"}
    result = subprocess.run([sys.executable, "-m", "benchmarks", "--quick", "--only", "session"],
                            capture_output=True, text=True, cwd=REPO, timeout=280,
                            env={**env, "XDG_DATA_HOME": str(data),
                                 "TMPDIR": str(tmp_path)})
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert not (data / "gpucloud-nb" / "gateways").exists() or \
        not any((data / "gpucloud-nb" / "gateways").iterdir())
