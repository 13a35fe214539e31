"""The kernel's relay (:mod:`gpucloud_nb.kernel.agent`) run as the instance runs it: its folder,
and what it leaves behind when it ends or is killed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from helpers import wait_for

from gpucloud_nb.kernel import agent


def start_relay(tmpdir: Path, info: Path) -> tuple[subprocess.Popen[bytes], Path]:
    """The relay under ``TMPDIR=tmpdir``, and its socket's folder once it says it is ready."""
    relay = subprocess.Popen([sys.executable, "-u", "-c", agent._RELAY, str(info)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             env={**os.environ, "TMPDIR": str(tmpdir)})
    assert relay.stdout is not None
    ready = json.loads(relay.stdout.readline())
    return relay, Path(ready["ready"]).parent


def test_a_relay_under_a_long_tmpdir_uses_tmp_and_removes_its_folder_on_sigterm(
        tmp_path: Path) -> None:
    long_tmp = tmp_path / ("t" * 100)
    long_tmp.mkdir()
    relay, folder = start_relay(long_tmp, tmp_path / "kernel.agent")
    assert folder.parent == Path("/tmp") and (folder / "s").is_socket()
    assert (tmp_path / "kernel.agent").read_text() == str(folder / "s")
    relay.send_signal(signal.SIGTERM)
    assert relay.wait(60) == 0
    assert not folder.exists() and not (tmp_path / "kernel.agent").exists()


def test_a_relay_whose_input_ends_removes_its_folder(tmp_path: Path) -> None:
    relay, folder = start_relay(tmp_path, tmp_path / "kernel.agent")
    assert folder.parent == tmp_path
    assert relay.stdin is not None
    relay.stdin.close()
    assert relay.wait(60) == 0
    assert not folder.exists()


def test_a_new_relay_removes_the_folders_of_killed_relays_and_keeps_live_ones(
        tmp_path: Path) -> None:
    killed, killed_folder = start_relay(tmp_path, tmp_path / "first.agent")
    killed.kill()  # SIGKILL: nothing of the relay runs, its folder stays
    killed.wait(60)
    assert killed_folder.exists()
    live, live_folder = start_relay(tmp_path, tmp_path / "second.agent")
    try:
        wait_for(lambda: not killed_folder.exists(), timeout=60)
        assert (live_folder / "s").is_socket()
        third, _ = start_relay(tmp_path, tmp_path / "third.agent")
        third.kill()
        third.wait(60)
        assert live_folder.exists()  # a relay whose process runs is never swept
    finally:
        live.kill()
        live.wait(60)
