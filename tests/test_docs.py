"""docs/choices.md is generated from the module docstrings, so the two never drift apart.

Regenerate it with ``./scripts/choices.py`` after changing a "not shown" choice.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[1]
CHOICES = REPO / "docs" / "choices.md"


def _choices_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("choices", REPO / "scripts" / "choices.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_choices_page_matches_the_docstrings() -> None:
    assert CHOICES.read_text(encoding="utf-8") == _choices_script().render(), (
        "docs/choices.md is out of date: run ./scripts/choices.py")


def test_the_choices_script_checks_without_writing(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    script = _choices_script()
    stale = tmp_path / "choices.md"
    stale.write_text("old\n", encoding="utf-8")
    monkeypatch.setattr(script, "CHOICES", stale)
    assert script.main(["--check"]) == 1 and stale.read_text(encoding="utf-8") == "old\n"
    assert script.main([]) == 0 and script.main(["--check"]) == 0
    assert stale.read_text(encoding="utf-8") == script.render()
    assert script.main(["--bogus"]) == 2


def test_no_reference_to_files_outside_the_repository() -> None:
    outside = ("spec/gpu-cloud-interface.md", "DESIGN.md", "shared design folder")
    for path in [REPO / "README.md", *REPO.glob("docs/*.md"), *REPO.glob("gpucloud_nb/**/*.py")]:
        text = path.read_text(encoding="utf-8")
        assert not [word for word in outside if word in text], path


def test_architecture_names_every_module() -> None:
    """ARCHITECTURE.md has a line for every module: its path, its name in a grouped row, or its
    package."""
    text = (REPO / "ARCHITECTURE.md").read_text(encoding="utf-8")
    package = REPO / "gpucloud_nb"
    missing = []
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package).as_posix()
        folder = path.parent.relative_to(package).as_posix()
        if not any(f"`{name}`" in text for name in (relative, path.name, f"{folder}/")):
            missing.append(relative)
    assert not missing, f"ARCHITECTURE.md has no line for {', '.join(missing)}"
