"""``connect()`` picks the real cloud with a key, else the sandbox, and says which."""

from __future__ import annotations

import pytest

from gpucloud_nb import connect
from gpucloud_nb.errors import InvalidInputError


def test_without_a_key_connect_starts_the_sandbox_and_says_so(monkeypatch, capsys) -> None:
    monkeypatch.delenv("GPUCLOUD_API_KEY", raising=False)
    cloud = connect()
    out = capsys.readouterr().out
    assert "SANDBOX" in out and "no charges" in out
    assert cloud.is_sandbox and "sandbox" in repr(cloud)
    assert len(cloud.instances.offers()) >= 40
    again = connect(quiet=True)
    assert again.base_url == cloud.base_url  # one sandbox per process
    assert capsys.readouterr().out == ""


def test_with_a_key_connect_uses_the_configured_cloud(monkeypatch, capsys, sandbox) -> None:
    monkeypatch.setenv("GPUCLOUD_API_KEY", sandbox.api_key)
    monkeypatch.setenv("GPUCLOUD_BASE_URL", sandbox.management_url)
    cloud = connect()
    assert not cloud.is_sandbox
    assert cloud.base_url == sandbox.management_url
    assert cloud.volumes.list() == []
    assert "SANDBOX" not in capsys.readouterr().out
    assert connect(sandbox=True, quiet=True).is_sandbox


def test_a_key_without_a_base_url_is_one_clear_sentence(monkeypatch) -> None:
    monkeypatch.setenv("GPUCLOUD_API_KEY", "sk-real-0123456789abcdef")
    monkeypatch.delenv("GPUCLOUD_BASE_URL", raising=False)
    with pytest.raises(InvalidInputError, match="No base URL: pass base_url= or set GPUCLOUD_BASE_URL"):
        connect()
