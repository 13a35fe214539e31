#!/usr/bin/env python3
"""Write docs/choices.md from the module docstrings, the one place each "not shown" choice lives.

Usage: ./scripts/choices.py            rewrite docs/choices.md
       ./scripts/choices.py --check    exit 1 when docs/choices.md is out of date (writes nothing)

``tests/test_docs.py`` runs the check, so the page never drifts from the code.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CHOICES = REPO / "docs" / "choices.md"
#: The modules whose docstrings record what was chosen where the interface is silent.
MODULES = (
    "gpucloud_nb/client/management.py", "gpucloud_nb/client/inference.py",
    "gpucloud_nb/client/billing.py", "gpucloud_nb/models.py",
    "gpucloud_nb/create_request.py", "gpucloud_nb/durations.py", "gpucloud_nb/rules.py",
    "gpucloud_nb/media/__init__.py", "gpucloud_nb/frames.py", "gpucloud_nb/sandbox/app.py",
    "gpucloud_nb/sandbox/lifecycle.py", "gpucloud_nb/sandbox/catalogue.py",
    "gpucloud_nb/sandbox/cloud_init.py",
    "gpucloud_nb/sandbox/inference/app.py", "gpucloud_nb/kernel/provisioner.py",
    "gpucloud_nb/kernel/spec.py", "gpucloud_nb/kernel/sync.py", "gpucloud_nb/kernel/namespace.py",
    "gpucloud_nb/kernel/session.py", "gpucloud_nb/kernel/agent.py", "gpucloud_nb/kernel/move.py",
    "gpucloud_nb/cluster/spec.py", "gpucloud_nb/cluster/checks.py", "gpucloud_nb/cluster/launch.py",
    "gpucloud_nb/cluster/found.py", "gpucloud_nb/cluster/watch.py", "gpucloud_nb/cluster/adaptive.py",
    "gpucloud_nb/client/multinode.py",
    "gpucloud_nb/inference_records.py", "gpucloud_nb/inference_rules.py",
    "gpucloud_nb/client/inference_instance_ops.py", "gpucloud_nb/client/inference_instances.py",
    "gpucloud_nb/client/key_book.py", "gpucloud_nb/sandbox/inference_instances.py",
    "gpucloud_nb/gateway/endpoint_routes.py", "gpucloud_nb/gateway/flights.py",
    "gpucloud_nb/gateway/key_book_routes.py",
    "gpucloud_nb/magics_ai.py", "gpucloud_nb/lab/jupyternaut.py",
)
HEADER = """# Choices where the interface is silent

[interface.md](interface.md) says "not shown" in many places. This page collects what the package
chose in each, module by module. It is generated from the module docstrings
(`scripts/choices.py`), which stay the one place each choice is written.
"""


def render() -> str:
    """The page: each module's first docstring line and its paragraphs, examples left out."""
    parts = [HEADER]
    for module in MODULES:
        doc = ast.get_docstring(ast.parse((REPO / module).read_text(encoding="utf-8"))) or ""
        first, _, rest = doc.partition("\n")
        blocks = rest.strip().split("\n\n")  # the examples stay in the code
        text = "\n\n".join(b for b in blocks if ">>>" not in b and not b.lstrip().startswith("$ "))
        parts.append(f"\n## `{module}`\n\n{first.strip()}\n\n{text}\n")
    return "".join(parts)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args not in ([], ["--check"]):
        print("usage: scripts/choices.py [--check]", file=sys.stderr)
        return 2
    page = render()
    if args:
        if CHOICES.read_text(encoding="utf-8") != page:
            print("docs/choices.md is out of date: run ./scripts/choices.py", file=sys.stderr)
            return 1
        return 0
    CHOICES.write_text(page, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
