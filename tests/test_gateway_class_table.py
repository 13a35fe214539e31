"""``gpucloud-nb gateway class`` as its own process against a gateway in front of a sandbox."""

from __future__ import annotations

import csv
import io
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from gpucloud_nb import GPUCloud
from gpucloud_nb.gateway import Gateway
from gpucloud_nb.sandbox import Sandbox
from tests.helpers import ADA, BOB, TEACHER, launch, without_settings


def class_cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpucloud_nb", "gateway", "class", *args],
                          capture_output=True, text=True, timeout=120, env=without_settings(**env))


def test_the_class_table_from_the_environment_or_a_key_file(
        upstream: Sandbox, gateway_factory: Callable[..., Gateway], tmp_path: Path) -> None:
    gateway = gateway_factory(f"{ADA} 20/day Ada\n{BOB} - Bob\n{TEACHER} teacher Grace\n")
    with GPUCloud(api_key=ADA, base_url=gateway.url) as ada:
        launch(ada, "one")
    done = class_cli(env={"GPUCLOUD_BASE_URL": gateway.url, "GPUCLOUD_API_KEY": TEACHER})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split()[:3] == ["student", "instances", "$/h"]
    assert lines[1].split()[:2] == ["Ada", "1"] and "$20.00/day" in lines[1]
    assert lines[2].split()[:2] == ["Bob", "0"] and len(lines) == 3
    key_file = tmp_path / "teacher.key"
    key_file.write_text(f"# Grace's key\n{TEACHER}\n", encoding="utf-8")
    done = class_cli("--url", gateway.url, "--key-file", str(key_file), "--csv", env={})
    assert done.returncode == 0, done.stderr
    assert [row["name"] for row in csv.DictReader(io.StringIO(done.stdout))] == ["Ada", "Bob"]
    assert not any(key in done.stdout + done.stderr for key in (ADA, BOB, TEACHER))


def test_a_student_key_or_no_key_is_one_sentence(gateway_factory: Callable[..., Gateway],
                                                 tmp_path: Path) -> None:
    gateway = gateway_factory()
    done = class_cli(env={"GPUCLOUD_BASE_URL": gateway.url, "GPUCLOUD_API_KEY": ADA})
    assert done.returncode == 1 and done.stdout == ""
    assert "no teacher's view for this key" in done.stderr and len(done.stderr.splitlines()) == 1
    assert ADA not in done.stderr
    done = class_cli(env={"GPUCLOUD_BASE_URL": gateway.url})
    assert done.returncode == 2 and "GPUCLOUD_API_KEY" in done.stderr
    assert len(done.stderr.splitlines()) == 1
    done = class_cli("--key-file", str(tmp_path / "missing"), env={"GPUCLOUD_BASE_URL":
                                                                   gateway.url})
    assert done.returncode == 2 and "cannot read the key file" in done.stderr
    done = class_cli(TEACHER, env={"GPUCLOUD_BASE_URL": gateway.url})
    assert done.returncode == 2 and TEACHER not in done.stderr
