"""The notebook folder copied to an instance when a remote kernel starts (plan and caps).

The copy itself, over SSH into a sandbox instance, is tested with the kernel in
tests/test_kernel_provisioner.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpucloud_nb.errors import InvalidInputError
from gpucloud_nb.kernel.sync import cap_bytes, cap_files, plan, remote_folder, summary


def names(found: object) -> list[str]:
    return [name for name, _, _, _ in found.files]  # type: ignore[attr-defined]


def test_hidden_files_and_checkpoints_are_skipped_and_named(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("print(1)")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.csv").write_text("x")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "HEAD").write_text("ref")
    (tmp_path / ".ipynb_checkpoints").mkdir()
    (tmp_path / "sub" / ".env").write_text("KEY=1")

    found = plan(tmp_path, cap_bytes=2**20)

    assert names(found) == ["a.py", "sub/b.csv"]
    assert found.hidden.names == [".git", ".ipynb_checkpoints", "sub/.env"]
    assert summary(found) == [
        "Skipped 3 hidden file(s) or folder(s): .git, .ipynb_checkpoints, sub/.env."]


def test_symbolic_links_are_never_followed(tmp_path: Path) -> None:
    folder, outside = tmp_path / "project", tmp_path / "elsewhere"
    folder.mkdir()
    outside.mkdir()
    (outside / "id_rsa").write_text("PRIVATE")
    (outside / "docs").mkdir()
    (outside / "docs" / "secret.txt").write_text("x")
    (folder / ".env").write_text("TOKEN=1")
    (folder / "notes.txt").write_text("mine")
    (folder / "key").symlink_to(outside / "id_rsa")           # out of the folder
    (folder / "settings").symlink_to(folder / ".env")         # to a hidden file inside
    (folder / "docs").symlink_to(outside / "docs", target_is_directory=True)

    found = plan(folder, cap_bytes=2**20)

    assert names(found) == ["notes.txt"]
    assert found.links.names == ["docs", "key", "settings"]
    assert "Skipped 3 symbolic link(s), never followed: docs, key, settings." in summary(found)


def test_environments_and_caches_are_skipped_and_said(tmp_path: Path) -> None:
    for folder in ("node_modules/left-pad", "venv/lib", "src/__pycache__", "my-env/lib", "src"):
        (tmp_path / folder).mkdir(parents=True, exist_ok=True)
    (tmp_path / "node_modules" / "left-pad" / "index.js").write_text("x")
    (tmp_path / "venv" / "lib" / "big.so").write_text("x")
    (tmp_path / "src" / "__pycache__" / "m.pyc").write_text("x")
    (tmp_path / "my-env" / "pyvenv.cfg").write_text("home = /usr/bin")  # a venv by another name
    (tmp_path / "src" / "m.py").write_text("x")

    found = plan(tmp_path, cap_bytes=2**20)

    assert names(found) == ["src/m.py"]
    assert found.heavy.names == ["my-env", "node_modules", "venv", "src/__pycache__"]
    assert summary(found) == [
        "Skipped 4 environment or cache folder(s), which belong to this machine: my-env, "
        "node_modules, venv, src/__pycache__."]


def test_the_walk_stops_at_the_file_cap_and_says_so(tmp_path: Path) -> None:
    for index in range(3):
        (tmp_path / f"part-{index}").mkdir()
        for file in range(40):
            (tmp_path / f"part-{index}" / f"{file:03}.txt").write_text("")

    found = plan(tmp_path, cap_bytes=2**20, max_files=50)

    assert len(found.files) == 50 and found.stopped
    assert names(found)[:2] == ["part-0/000.txt", "part-0/001.txt"]
    assert summary(found) == ["Stopped at 50 files: the rest of the folder was not copied (set "
                              "GPUCLOUD_KERNEL_SYNC_FILES to raise the limit)."]
    assert not plan(tmp_path, cap_bytes=2**20, max_files=120).stopped


def test_files_past_the_cap_are_skipped_and_smaller_ones_still_fit(tmp_path: Path) -> None:
    (tmp_path / "1-small.txt").write_bytes(b"x" * 400)
    (tmp_path / "2-big.bin").write_bytes(b"x" * 900)
    (tmp_path / "3-small.txt").write_bytes(b"x" * 500)

    found = plan(tmp_path, cap_bytes=1000)

    assert names(found) == ["1-small.txt", "3-small.txt"]
    assert found.total == 900 and found.over_cap.names == ["2-big.bin"]
    assert "set GPUCLOUD_KERNEL_SYNC_MB to raise it" in summary(found)[0]


def test_the_caps_come_from_the_environment() -> None:
    assert cap_bytes({}) == 100 * 2**20
    assert cap_bytes({"GPUCLOUD_KERNEL_SYNC_MB": "0.5"}) == 2**19
    assert cap_files({}) == 5000
    assert cap_files({"GPUCLOUD_KERNEL_SYNC_FILES": "20"}) == 20
    for bad in ("lots", "-1", "nan", "inf"):
        with pytest.raises(InvalidInputError) as raised:
            cap_bytes({"GPUCLOUD_KERNEL_SYNC_MB": bad})
        assert str(raised.value) == ("GPUCLOUD_KERNEL_SYNC_MB must be a number of megabytes "
                                     f"(0 or more), not {bad!r}.")
        with pytest.raises(InvalidInputError) as raised:
            cap_files({"GPUCLOUD_KERNEL_SYNC_FILES": bad})
        assert str(raised.value) == ("GPUCLOUD_KERNEL_SYNC_FILES must be a number of files "
                                     f"(0 or more), not {bad!r}.")


def test_the_remote_folder_is_named_after_the_notebook_folder(tmp_path: Path) -> None:
    assert remote_folder(tmp_path / "My Project (v2)") == "My-Project-v2"
    assert remote_folder("/") == "notebook"
    assert os.sep not in remote_folder(tmp_path / "a" / "b")
