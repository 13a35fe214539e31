"""docs/choices.md is generated from the module docstrings, so the two never drift apart.

Regenerate it with ``python tests/test_docs.py`` after changing a "not shown" choice.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CHOICES = REPO / "docs" / "choices.md"
#: The modules whose docstrings record what was chosen where the interface is silent.
MODULES = (
    "gpucloud_nb/client/management.py", "gpucloud_nb/client/inference.py",
    "gpucloud_nb/client/billing.py", "gpucloud_nb/models.py", "gpucloud_nb/rules.py",
    "gpucloud_nb/media/__init__.py", "gpucloud_nb/frames.py", "gpucloud_nb/sandbox/app.py",
    "gpucloud_nb/sandbox/lifecycle.py", "gpucloud_nb/sandbox/catalogue.py",
    "gpucloud_nb/sandbox/inference/app.py", "gpucloud_nb/kernel/provisioner.py",
    "gpucloud_nb/kernel/spec.py", "gpucloud_nb/kernel/sync.py",
)
HEADER = """# Choices where the interface is silent

[interface.md](interface.md) says "not shown" in many places. This page collects what the package
chose in each, module by module. It is generated from the module docstrings (`python
tests/test_docs.py`), which stay the one place each choice is written.
"""


def render() -> str:
    parts = [HEADER]
    for module in MODULES:
        doc = ast.get_docstring(ast.parse((REPO / module).read_text(encoding="utf-8"))) or ""
        first, _, rest = doc.partition("\n")
        blocks = rest.strip().split("\n\n")  # the examples stay in the code
        text = "\n\n".join(b for b in blocks if ">>>" not in b and not b.lstrip().startswith("$ "))
        parts.append(f"\n## `{module}`\n\n{first.strip()}\n\n{text}\n")
    return "".join(parts)


def test_choices_page_matches_the_docstrings() -> None:
    assert CHOICES.read_text(encoding="utf-8") == render(), (
        "docs/choices.md is out of date: run python tests/test_docs.py")


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


if __name__ == "__main__":
    CHOICES.write_text(render(), encoding="utf-8")
    sys.exit(0)
