"""Every docstring example runs, or says it is not run.

An example that stands alone (``parse_datetime("…")``, ``format_price(2.49)``) runs here as a
doctest, so it cannot drift from the code. One that needs a cloud, a notebook or a file
(``cloud.instances.list()``) is marked ``# doctest: +SKIP``: it is illustration, and says so.
"""

from __future__ import annotations

import contextlib
import doctest
import importlib
import ipaddress
import pkgutil
import socket
from collections.abc import Iterator
from typing import Any

import pytest

import gpucloud_nb

# Modules that cannot be imported without an optional front end, or that start something on import.
_NOT_IMPORTED = {"gpucloud_nb.__main__"}


def _loopback(host: Any) -> bool:
    if host in ("localhost", b"localhost", None):
        return True
    try:
        return ipaddress.ip_address(host.decode() if isinstance(host, bytes) else host).is_loopback
    except ValueError:
        return False


@contextlib.contextmanager
def loopback_only() -> Iterator[None]:
    """While open, resolving or connecting to anything but loopback fails instead of sending."""
    resolve, connect = socket.getaddrinfo, socket.socket.connect

    def guarded_resolve(host: Any, *args: Any, **kwargs: Any) -> Any:
        if not _loopback(host):
            raise OSError(f"docstring examples stay on loopback, not {host!r}")
        return resolve(host, *args, **kwargs)

    def guarded_connect(self: socket.socket, address: Any) -> None:
        if self.family in (socket.AF_INET, socket.AF_INET6) and not _loopback(address[0]):
            raise OSError(f"docstring examples stay on loopback, not {address[0]!r}")
        connect(self, address)

    socket.getaddrinfo, socket.socket.connect = guarded_resolve, guarded_connect  # type: ignore[method-assign]
    try:
        yield
    finally:
        socket.getaddrinfo, socket.socket.connect = resolve, connect  # type: ignore[method-assign]


def _modules() -> list[str]:
    names = [gpucloud_nb.__name__]
    for info in pkgutil.walk_packages(gpucloud_nb.__path__, prefix="gpucloud_nb."):
        if info.name not in _NOT_IMPORTED:
            names.append(info.name)
    return sorted(names)


@pytest.mark.parametrize("name", _modules())
def test_docstring_examples_run_or_are_marked(
        name: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # an example that writes a file writes it here, not in the repo
    module = importlib.import_module(name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(
        optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False)
    report: list[str] = []
    failed = 0
    with loopback_only():
        for test in finder.find(module, name, globs=dict(vars(module))):
            failed += runner.run(test, out=report.append).failed
    assert failed == 0, (
        f"{failed} docstring example(s) of {name} fail: fix them, or mark one that needs a cloud "
        "or a notebook with '# doctest: +SKIP'.\n" + "".join(report)[-3000:])
