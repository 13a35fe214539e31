"""``gpucloud_nb.serving``: a foreground server's access log never holds up its answers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx

from gpucloud_nb.sandbox import Sandbox
from tests.helpers import ADA, UPSTREAM_KEY


def test_a_stdout_nobody_reads_does_not_stop_the_server(upstream: Sandbox,
                                                         tmp_path: Path) -> None:
    # Each answer logs a line of ~4 kB: a pipe (64 kB) nobody reads is full after ~16 of them,
    # and a server writing its access log on its event loop stops answering there.
    keys = tmp_path / "class.keys"
    keys.write_text(f"{ADA} - Ada\n", encoding="utf-8")
    process = subprocess.Popen(
        [sys.executable, "-m", "gpucloud_nb", "gateway", "--keys", str(keys), "--upstream",
         upstream.management_url, "--port", "0", "--home", str(tmp_path / "home")],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        env={**os.environ, "GPUCLOUD_UPSTREAM_API_KEY": UPSTREAM_KEY})
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip().removeprefix("management: ")
        assert url.startswith("http://127.0.0.1:")
        with httpx.Client(base_url=url, headers={"x-api-key": ADA}, timeout=60) as ada:
            for n in range(60):
                answer = ada.get("/gateway/me", params={"pad": "x" * 4000, "n": n})
                assert answer.status_code == 200, answer.text
    finally:
        process.kill()
        process.wait(30)
