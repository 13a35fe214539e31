"""No import cycle inside ``gpucloud_nb/``: the layers import downwards only.

Every import counts, also one deferred into a function body; one under ``if TYPE_CHECKING:``
does not, since it never runs. ``from package import name`` points at the submodule when
``name`` is one, else at the package's ``__init__``.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "gpucloud_nb"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement that can run: all but those under ``if TYPE_CHECKING:``."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def _parse(path: Path) -> ast.Module:
    """``ast.parse``, once more if CPython 3.11's AST recursion check trips: its depth counter is
    one per process (CPython gh-106905), so a parse in another thread of this worker (a
    sandbox's, a kernel's) can make ours fail with "AST constructor recursion depth mismatch"
    although the file is fine (seen once under xdist at load 10)."""
    source = path.read_text(encoding="utf-8")
    try:
        return ast.parse(source)
    except SystemError:
        return ast.parse(source)


@functools.cache
def import_graph() -> dict[str, set[str]]:
    """``module -> the gpucloud_nb modules it imports`` (read once per process)."""
    paths = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in paths}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in _imports(_parse(path)):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")
                    anchor = anchor[: len(anchor) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in paths else base
                           for alias in node.names]
            graph[name].update(t for t in targets if t in paths and t != name)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return found


def test_the_graph_sees_deferred_imports_and_skips_type_checking_ones() -> None:
    tree = ast.parse(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from gpucloud_nb import frames\n"
        "def later():\n    from gpucloud_nb.client import remote\n")
    names = [n.module for n in _imports(tree) if isinstance(n, ast.ImportFrom)]
    assert names == ["typing", "gpucloud_nb.client"]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycle_inside_the_package() -> None:
    graph = import_graph()
    assert "gpucloud_nb.errors" in graph["gpucloud_nb.client.instances"]
    assert cycles(graph) == []


def test_the_client_never_imports_the_cluster() -> None:
    """The client is the lower layer: no module of it imports ``gpucloud_nb.cluster``, deferred
    or for type checking alike (the cluster is offered from its own package)."""
    found = []
    for path in sorted((PACKAGE / "client").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            found += [f"{path.name}: {name}" for name in names
                      if name == "gpucloud_nb.cluster" or name.startswith("gpucloud_nb.cluster.")]
    assert found == []


def test_the_client_imports_nothing_of_the_layers_above_it() -> None:
    """``client/`` is a lower layer: the kernel package, the Lab extension, widgets and magics
    build on it, never the other way (not even in a deferred import)."""
    above = ("gpucloud_nb.kernel", "gpucloud_nb.lab", "gpucloud_nb.widgets", "gpucloud_nb.magics")
    graph = import_graph()
    upward = {(module, target) for module, targets in graph.items()
              if module.startswith("gpucloud_nb.client") for target in targets
              if target.startswith(above)}
    assert upward == set()
