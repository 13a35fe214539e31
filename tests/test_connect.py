"""``connect()`` picks the real cloud with a key, else the sandbox, and says which."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import OTHER_UID, FakeService, as_other_user

from gpucloud_nb import connect
from gpucloud_nb._connect import DIRECT_SENTENCE
from gpucloud_nb.client.gateway import unkept
from gpucloud_nb.errors import ConnectionFailedError, InvalidInputError
from gpucloud_nb.sandbox import processes, service


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


def test_without_a_key_and_gateway_off_the_sandbox_itself_keeps_no_money_rule(
        monkeypatch, capsys) -> None:
    monkeypatch.delenv("GPUCLOUD_API_KEY", raising=False)
    monkeypatch.setenv("GPUCLOUD_GATEWAY", "off")
    with connect() as cloud:
        assert cloud.is_sandbox and cloud.base_url == cloud.sandbox.management_url
        out = capsys.readouterr().out
        assert "SANDBOX" in out and DIRECT_SENTENCE in out
        assert {k.where for k in (cloud.auto_delete, cloud.budgets, cloud.idle_delete)} == {
            "nobody"}
        offer = cloud.instances.offers(deployment_type="vm", available=True)[0]
        with pytest.raises(InvalidInputError) as refused:
            cloud.instances.create(name="unkept", cloud_provider=offer.cloud.id,
                                   instance_id=offer.instance_id,
                                   region=offer.available_regions[0],
                                   vm={"os": offer.configuration.os[0]}, delete_after=60)
        assert str(refused.value) == unkept("delete_after", at_create=True)
        assert "unkept" not in {i.name for i in cloud.instances.list()}  # nothing was sent


def test_with_a_key_connect_uses_the_configured_cloud(monkeypatch, capsys, sandbox) -> None:
    monkeypatch.setenv("GPUCLOUD_API_KEY", sandbox.api_key)
    monkeypatch.setenv("GPUCLOUD_BASE_URL", sandbox.management_url)
    cloud = connect()
    assert not cloud.is_sandbox
    # through the user's personal gateway in front of it (tests/test_gateway_personal.py)
    assert cloud.base_url != sandbox.management_url and cloud.gateway_status() is not None
    assert cloud.volumes.list() == []
    assert "SANDBOX" not in capsys.readouterr().out
    assert connect(sandbox=True, quiet=True).is_sandbox


def test_a_key_without_a_base_url_is_one_clear_sentence(monkeypatch) -> None:
    monkeypatch.setenv("GPUCLOUD_API_KEY", "sk-real-0123456789abcdef")
    monkeypatch.delenv("GPUCLOUD_BASE_URL", raising=False)
    with pytest.raises(InvalidInputError, match="No base URL: pass base_url= or set GPUCLOUD_BASE_URL"):
        connect()


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A directory under /tmp that another user may enter (pytest's own are private to us)."""
    base = Path(tempfile.mkdtemp(prefix="gpucloud-nb-two-users-"))
    base.chmod(0o755)
    yield base
    shutil.rmtree(base, ignore_errors=True)


@pytest.mark.parametrize("mode", [0o700, 0o777], ids=oct)
def test_a_home_of_another_user_is_refused_and_nothing_in_it_is_trusted(
        shared_tmp: Path, mode: int, monkeypatch: pytest.MonkeyPatch) -> None:
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip("making a home owned by another user needs root (os.chown)")
    home = shared_tmp / "home"
    home.mkdir()
    # Another user's home, made to fool us: a service whose runtime file, challenge secret and
    # lock all agree (the lock is held here, so even the pid checks pass).
    secret = b"chosen-by-the-other-user"
    (home / service.SETTINGS_FILE).write_text(json.dumps({"challenge": secret.decode()}))
    lock = processes.service_lock(home)
    assert lock is not None
    try:
        with FakeService(pid=os.getpid(), secret=secret) as fake:
            service.write_runtime(home, service.Runtime(
                fake.url, f"{fake.url}/inference", os.getpid(), "their-key", "their-secret",
                0.0, 3.0, str(home)))
            os.chown(home, OTHER_UID, OTHER_UID)
            home.chmod(mode)
            monkeypatch.setenv("GPUCLOUD_SANDBOX_HOME", str(home))
            with pytest.raises(ConnectionFailedError) as refused:
                connect(quiet=True)
    finally:
        lock.close()
    assert str(refused.value) == (
        f"The sandbox home {home} belongs to another user (uid {OTHER_UID}), so its files "
        "cannot be trusted; set GPUCLOUD_SANDBOX_HOME to a directory of your own.")
    assert fake.requests == []
    assert stat.S_IMODE(home.stat().st_mode) == mode and home.stat().st_uid == OTHER_UID


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o702], ids=oct)
def test_a_home_others_can_write_is_refused_and_left_as_it_is(
        tmp_path: Path, mode: int, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    home.mkdir()
    home.chmod(mode)
    monkeypatch.setenv("GPUCLOUD_SANDBOX_HOME", str(home))
    with pytest.raises(ConnectionFailedError) as refused:
        connect(quiet=True)
    assert str(refused.value) == (
        f"The sandbox home {home} is writable by other users (mode {mode:04o}), so its files "
        "cannot be trusted; `chmod 700` it if you trust what is inside, or set "
        "GPUCLOUD_SANDBOX_HOME to a private directory.")
    assert list(home.iterdir()) == [] and stat.S_IMODE(home.stat().st_mode) == mode


def test_a_home_that_cannot_be_made_is_one_sentence(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("GPUCLOUD_SANDBOX_HOME", str(tmp_path / "a-file" / "home"))
    with pytest.raises(ConnectionFailedError) as refused:
        connect(quiet=True)
    assert str(refused.value) == (
        f"Cannot create the sandbox home {tmp_path / 'a-file' / 'home'}: Not a directory; set "
        "GPUCLOUD_SANDBOX_HOME to a directory you can write.")


def test_a_read_only_home_is_one_sentence(shared_tmp: Path) -> None:
    home = shared_tmp / "home"
    home.mkdir(mode=0o500)
    command = [sys.executable, "-c", READ_ONLY]
    if hasattr(os, "geteuid") and os.geteuid() == 0:  # root writes anywhere: be another user
        os.chown(home, OTHER_UID, OTHER_UID)
        command = as_other_user(command)
    done = subprocess.run(command, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "GPUCLOUD_SANDBOX_HOME": str(home)})
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert done.stdout == (
        f"ConnectionFailedError: The sandbox service cannot start: writing in its home {home} "
        "failed (permission denied); free space there or set GPUCLOUD_SANDBOX_HOME to a "
        "writable directory.\n")
    assert list(home.iterdir()) == [] and stat.S_IMODE(home.stat().st_mode) == 0o500


READ_ONLY = """
from gpucloud_nb import connect
from gpucloud_nb._connect import DIRECT_SENTENCE
from gpucloud_nb.client.gateway import unkept
from gpucloud_nb.errors import GPUCloudError
try:
    connect(quiet=True)
except GPUCloudError as error:
    print(f"{type(error).__name__}: {error}")
"""
