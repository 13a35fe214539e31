"""The notebook folder copied to an instance when a remote kernel starts (plan and cap)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpucloud_nb.errors import InvalidInputError
from gpucloud_nb.kernel.sync import cap_bytes, plan, remote_folder, summary


def test_hidden_files_and_checkpoints_are_skipped_and_named(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("print(1)")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.csv").write_text("x")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "HEAD").write_text("ref")
    (tmp_path / ".ipynb_checkpoints").mkdir()
    (tmp_path / "sub" / ".env").write_text("KEY=1")

    found = plan(tmp_path, cap_bytes=2**20)

    assert [name for name, _, _ in found.files] == ["a.py", "sub/b.csv"]
    assert found.hidden == [".git", ".ipynb_checkpoints", "sub/.env"]
    assert summary(found) == [
        "Skipped 3 hidden file(s) or folder(s): .git, .ipynb_checkpoints, sub/.env."]


def test_files_past_the_cap_are_skipped_and_smaller_ones_still_fit(tmp_path: Path) -> None:
    (tmp_path / "1-small.txt").write_bytes(b"x" * 400)
    (tmp_path / "2-big.bin").write_bytes(b"x" * 900)
    (tmp_path / "3-small.txt").write_bytes(b"x" * 500)

    found = plan(tmp_path, cap_bytes=1000)

    assert [name for name, _, _ in found.files] == ["1-small.txt", "3-small.txt"]
    assert found.total == 900 and found.over_cap == ["2-big.bin"]
    assert "set GPUCLOUD_KERNEL_SYNC_MB to raise it" in summary(found)[0]


def test_the_cap_comes_from_the_environment() -> None:
    assert cap_bytes({}) == 100 * 2**20
    assert cap_bytes({"GPUCLOUD_KERNEL_SYNC_MB": "0.5"}) == 2**19
    for bad in ("lots", "-1", "nan", "inf"):
        with pytest.raises(InvalidInputError) as raised:
            cap_bytes({"GPUCLOUD_KERNEL_SYNC_MB": bad})
        assert str(raised.value) == ("GPUCLOUD_KERNEL_SYNC_MB must be a number of megabytes "
                                     f"(0 or more), not {bad!r}.")


def test_the_remote_folder_is_named_after_the_notebook_folder(tmp_path: Path) -> None:
    assert remote_folder(tmp_path / "My Project (v2)") == "My-Project-v2"
    assert remote_folder("/") == "notebook"
