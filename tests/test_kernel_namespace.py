"""A namespace saved to a file and restored: values, code defined in a notebook, what cannot
move, and large arrays carried out of band (in this process, and in a fresh one)."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from pathlib import Path

import numpy
import pandas
import pytest

from gpucloud_nb.kernel import namespace
from gpucloud_nb.kernel.namespace import RestoreError, load, prepare, save
from tests.samples import NOTEBOOK_DEFINITIONS

NOTEBOOK = f"""
import numpy as np
import collections
{NOTEBOOK_DEFINITIONS}square = lambda v: v * v
"""


def notebook_namespace() -> dict:
    """Names as a notebook defines them: ``__main__``'s functions, classes and lambdas."""
    names: dict = {"__name__": "__main__"}
    exec(compile(NOTEBOOK, "<cell>", "exec"), names)
    return names


def test_values_code_and_modules_arrive_equal_in_a_fresh_process(tmp_path: Path) -> None:
    names = notebook_namespace()
    frame = pandas.DataFrame({"a": [1, 2, 3], "b": ["x", "y", "z"]})
    names.update(count=42, text="héllo", frame=frame, big=numpy.arange(2_000_000.0),
                 point=names["Point"](3, 4), In=["history"], _hidden=1)
    path = tmp_path / "ns.gpucloud"
    saved = save(names, path)
    assert saved.skipped == {}
    assert saved.names == ["Point", "big", "collections", "count", "double", "frame", "np",
                           "point", "square", "text"]  # no _names, no IPython's

    check = """
import sys
from gpucloud_nb.kernel.namespace import load
got = load(sys.argv[1]).values
assert got["count"] == 42 and got["text"] == "héllo"
assert got["np"].__name__ == "numpy" and got["collections"].__name__ == "collections"
assert got["double"](21) == 42 and got["square"](5) == 25
assert got["point"].norm() == 5.0 and isinstance(got["point"], got["Point"])
assert got["frame"].equals(__import__("pandas").DataFrame({"a": [1, 2, 3], "b": ["x", "y", "z"]}))
assert (got["big"] == __import__("numpy").arange(2_000_000.0)).all()
print("ok")
"""
    # A fresh interpreter has no Point, double or square: they came by value.
    result = subprocess.run([sys.executable, "-c", check, str(path)], capture_output=True,
                            text=True, timeout=120)
    assert result.stdout.strip() == "ok", result.stderr


def test_what_cannot_move_is_named_with_the_reason(tmp_path: Path) -> None:
    def numbers():
        yield 1

    with open(tmp_path / "log.txt", "w") as log, socket.socket() as sock:
        thread = threading.Thread(target=lambda: None)
        holder = {"inside": log}  # a file inside a dict: the pickle error names it
        saved = save({"log": log, "sock": sock, "gen": numbers(), "thread": thread,
                      "lock": threading.Lock(), "holder": holder, "kept": 1},
                     tmp_path / "ns.gpucloud")
    assert saved.names == ["kept"]
    assert saved.skipped == {"gen": "a generator", "lock": "a lock", "log": "an open file",
                             "sock": "a socket", "thread": "a thread",
                             "holder": "it holds an open file"}
    assert load(tmp_path / "ns.gpucloud").skipped == saved.skipped


def test_arrays_go_out_of_band_and_come_back_over_the_file_buffer(tmp_path: Path) -> None:
    big = numpy.random.default_rng(1).random((1000, 1000))  # 8 MB
    prepared = prepare({"big": big, "frame": pandas.DataFrame({"v": numpy.arange(10**6)})})
    entries = {entry.name: entry for entry in prepared.entries}
    # The pickles hold no array bytes: the buffers are views of the arrays themselves.
    assert len(entries["big"].data) < 1000 and entries["big"].buffers[0].nbytes == big.nbytes
    assert len(entries["frame"].data) < 2000
    assert numpy.shares_memory(numpy.asarray(entries["big"].buffers[0]), big)
    prepared.write(tmp_path / "ns.gpucloud")

    restored = load(tmp_path / "ns.gpucloud").values["big"]
    assert (restored == big).all()
    assert not restored.flags.owndata and restored.flags.writeable  # over the read buffer
    assert restored.ctypes.data % 64 == 0  # aligned for vector instructions
    restored[0, 0] = -1.0  # writable in place


def test_a_name_that_cannot_be_restored_is_named_and_the_others_arrive(tmp_path: Path) -> None:
    names = notebook_namespace()
    exec(compile("class Fragile:\n    def __setstate__(self, state):\n"
                 "        raise RuntimeError('cannot come back')\n", "<cell>", "exec"), names)
    names["fragile"] = names["Fragile"]()
    names["fragile"].x = 1
    names["kept"] = [1, 2]
    save(names, tmp_path / "ns.gpucloud")
    loaded = load(tmp_path / "ns.gpucloud")
    assert loaded.failed == {"fragile": "RuntimeError: cannot come back"}
    assert loaded.values["kept"] == [1, 2]


def test_a_missing_module_is_named(tmp_path: Path) -> None:
    import json

    save({"json": json}, tmp_path / "ns.gpucloud")

    def refuse(name: str) -> None:
        raise ModuleNotFoundError(f"No module named {name!r}")

    loaded = load(tmp_path / "ns.gpucloud", importer=refuse)
    assert loaded.failed == {"json": "module json cannot be imported here "
                                     "(No module named 'json')"}


def test_a_file_that_is_not_a_checkpoint_or_is_cut_short_is_one_sentence(tmp_path: Path) -> None:
    other = tmp_path / "other.gpucloud"
    other.write_bytes(b"PK\x03\x04 a zip")
    with pytest.raises(RestoreError, match=r"other.gpucloud is not a gpucloud-nb checkpoint\.$"):
        load(other)
    whole = tmp_path / "ns.gpucloud"
    save({"big": numpy.arange(10**6), "a_small": 1}, whole)
    cut = tmp_path / "cut.gpucloud"
    cut.write_bytes(whole.read_bytes()[:-4096])
    loaded = load(cut)
    assert loaded.failed == {"big": "the file is cut short"} and loaded.values == {"a_small": 1}


def test_torch_tensors_come_back_on_the_cpu_and_out_of_band(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    tensor = torch.arange(1000.0, requires_grad=False)
    prepared = prepare({"t": tensor})
    assert len(prepared.entries[0].data) < 1000  # the values went out of band
    prepared.write(tmp_path / "ns.gpucloud")
    loaded = load(tmp_path / "ns.gpucloud")
    assert torch.equal(loaded.values["t"], tensor)


def test_user_names_leave_out_ipython_and_private_names() -> None:
    assert namespace.user_names({"x": 1, "_": 2, "Out": {}, "exit": 0, "get_ipython": 0},
                                hidden={"y"}) == ["x"]


def test_notebook_functions_use_the_restored_names_not_copies(tmp_path: Path) -> None:
    names: dict = {"__name__": "__main__"}
    exec(compile("import numpy\n"
                 "data = numpy.ones(1_000_000)\n"
                 "history = []\n"
                 "def train(steps):\n"
                 "    history.extend(range(steps))\n"
                 "    return float(data.sum())\n"
                 "class Model:\n"
                 "    def fit(self):\n"
                 "        return train(2)\n", "<cell>", "exec"), names)
    prepared = save(names, tmp_path / "ns.gpucloud")
    sizes = prepared.sizes()
    assert sizes["train"] < 2000 and sizes["Model"] < 3000  # data (8 MB) is not carried twice

    user_ns: dict = {"__name__": "__main__"}
    loaded = load(tmp_path / "ns.gpucloud", into=user_ns)
    user_ns.update(loaded.values)
    assert user_ns["train"](3) == 1e6 and user_ns["Model"]().fit() == 1e6
    assert user_ns["history"] == [0, 1, 2, 0, 1]  # the restored list, not a copy
    assert user_ns["train"].__globals__ is user_ns
