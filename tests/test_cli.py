"""The ``gpucloud-nb`` command, run as a real subprocess."""

from __future__ import annotations

import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from importlib.metadata import entry_points
from pathlib import Path

import httpx
import pytest
from helpers import FakeService

from gpucloud_nb.sandbox import processes, service
from gpucloud_nb.sandbox.cli import KEYS_MOVED, build_parser, main

ROOT = Path(__file__).resolve().parents[1]
KEY = "sk-live-cli-key-0123456789abcdef"
SECRET = "inference-secret-0123456789abcd"


class Lines:
    """The stdout lines of a process, read by a thread so a test can wait with a timeout."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self._queue: queue.Queue[str] = queue.Queue()
        self._thread = threading.Thread(target=self._pump, args=(process,), daemon=True)
        self._thread.start()

    def _pump(self, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            self._queue.put(line)

    def next(self, timeout: float = 15.0) -> str:
        try:
            return self._queue.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError("the sandbox printed nothing in time") from None

    def drain(self) -> str:
        self._thread.join(10)
        return "".join(_drain(self._queue))


def _drain(lines: queue.Queue[str]) -> list[str]:
    drained = []
    while not lines.empty():
        drained.append(lines.get_nowait())
    return drained


@pytest.fixture
def launch() -> Iterator:
    started: list[subprocess.Popen[str]] = []

    def run(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        process = subprocess.Popen(
            [sys.executable, "-m", "gpucloud_nb", "sandbox", *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
            env={**os.environ, "PYTHONUNBUFFERED": "0", **(env or {})},
        )
        started.append(process)
        return process

    yield run
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait(5)


def _stop(process: subprocess.Popen[str], lines: Lines, how: int) -> tuple[str, str]:
    process.send_signal(how)
    assert process.stderr is not None
    process.wait(10)
    err = process.stderr.read()
    assert process.returncode == 0, err
    assert "Traceback" not in err
    return lines.drain(), err


def test_sandbox_command_prints_urls_and_serves(launch, tmp_path: Path) -> None:
    process = launch("--port", "0", "--state", str(tmp_path / "cli.db"), "--launch-seconds",
                     "0.1", "--synthetic-offers", "120", "--latency", "0.01",
                     env={"GPUCLOUD_SANDBOX_API_KEY": KEY,
                          "GPUCLOUD_SANDBOX_INFERENCE_SECRET": SECRET})
    lines = Lines(process)
    management = lines.next()
    inference = lines.next()
    assert management.startswith("management: http://127.0.0.1:")
    base = management.split(": ", 1)[1].strip()
    assert inference.strip() == f"inference: {base}/inference"
    response = httpx.get(f"{base}/gpu-cloud/instances/offers", headers={"x-api-key": KEY})
    assert response.status_code == 200 and len(response.json()) == 120
    denied = httpx.get(f"{base}/gpu-cloud/volumes", headers={"x-api-key": "sandbox-key"})
    assert denied.status_code == 403
    out, err = _stop(process, lines, signal.SIGTERM)
    assert KEY not in out + err and SECRET not in out + err
    assert "try: curl -H 'x-api-key: $GPUCLOUD_API_KEY'" in err
    assert (tmp_path / "cli.db").exists()


def test_default_key_comes_with_a_ready_curl_line_and_ctrl_c_exits(launch) -> None:
    process = launch("--port", "0")
    lines = Lines(process)
    base = lines.next().split(": ", 1)[1].strip()
    assert lines.next().startswith("inference: ")
    assert httpx.get(f"{base}/gpu-cloud/volumes",
                     headers={"x-api-key": "sandbox-key"}).json() == []
    out, err = _stop(process, lines, signal.SIGINT)
    assert "public default API key" in err
    # the public default key is no secret: a newcomer gets a request that works as printed
    assert f"try: curl -H 'x-api-key: sandbox-key' {base}/gpu-cloud/instances/offers" in err
    assert "sandbox-secret" not in out + err


def test_busy_port_is_a_clear_error(launch) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        process = launch("--port", str(port))
        out, err = process.communicate(timeout=15)
    assert process.returncode == 1
    assert f"cannot serve on 127.0.0.1:{port}" in err and "Traceback" not in err
    assert "management:" not in out


def test_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "sandbox" in capsys.readouterr().out
    for bad in (["sandbox", "--port", "http"], ["sandbox", "--port", "70000"],
                ["sandbox", "--launch-seconds", "-1"], ["sandbox", "--latency", "soon"],
                ["sandbox", "--synthetic-offers", "0"], ["nothing"]):
        with pytest.raises(SystemExit) as exited:
            main(bad)
        assert exited.value.code == 2
    args = build_parser().parse_args(["sandbox"])
    assert (args.host, args.port, args.api_key, args.launch_seconds, args.latency) == (
        "127.0.0.1", 8765, None, 3.0, 0.0)
    with pytest.raises(SystemExit) as exited:
        main(["sandbox", "--help"])
    assert exited.value.code == 0
    shown = capsys.readouterr().out
    assert "--inference-secret-file" in shown and "--api-key " not in shown


REFUSED = {"--api-key": ("GPUCLOUD_SANDBOX_API_KEY", "API key"),
           "--inference-secret": ("GPUCLOUD_SANDBOX_INFERENCE_SECRET", "inference secret")}


@pytest.mark.parametrize("given", [["--api-key", KEY], [f"--api-key={KEY}"],
                                   ["--inference-secret", SECRET]])
def test_a_secret_on_the_command_line_is_refused_in_one_sentence(given: list[str]) -> None:
    """Any local user reads a process's arguments (/proc/PID/cmdline): secrets never go there."""
    captured = subprocess.run([sys.executable, "-m", "gpucloud_nb", "sandbox", "--port", "0",
                               *given], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert captured.returncode == 2
    option = next(word for word in given if word.startswith("--")).split("=")[0]
    variable, what = REFUSED[option]
    assert captured.stdout == "" and captured.stderr == (
        f"gpucloud-nb sandbox: error: {option} would show the {what} to every user of this "
        f"machine (in the process list); set {variable} or give {option}-file FILE instead.\n")


def test_secrets_from_files_with_a_byte_order_mark(launch, tmp_path: Path) -> None:
    """Windows editors save UTF-8 with a BOM: the key of the file still works."""
    key, secret = tmp_path / "key.txt", tmp_path / "secret.txt"
    key.write_text(f"{KEY}\n", encoding="utf-8-sig")
    secret.write_text(f"{SECRET}\n", encoding="utf-8-sig")
    assert key.read_bytes().startswith(b"\xef\xbb\xbf")
    process = launch("--port", "0", "--api-key-file", str(key), "--inference-secret-file",
                     str(secret), env={"GPUCLOUD_SANDBOX_API_KEY": ""})
    lines = Lines(process)
    base = lines.next().split(": ", 1)[1].strip()
    lines.next()
    answer = httpx.get(f"{base}/gpu-cloud/volumes", headers={"x-api-key": KEY})
    assert answer.status_code == 200, answer.text
    out, err = _stop(process, lines, signal.SIGTERM)
    assert SECRET not in out + err and KEY not in out + err


def test_an_empty_or_missing_secret_file_is_one_sentence(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    assert main(["sandbox", "--api-key-file", str(empty)]) == 2
    assert capsys.readouterr().err == (
        f"gpucloud-nb sandbox: error: --api-key-file: the file {empty} holds no API key.\n")
    missing = tmp_path / "missing.txt"
    assert main(["sandbox", "--inference-secret-file", str(missing)]) == 2
    assert capsys.readouterr().err == (f"gpucloud-nb sandbox: error: --inference-secret-file: No such "
                                       f"file or directory: {missing}.\n")


def test_console_script() -> None:
    """pyproject's ``gpucloud-nb`` entry point runs; so does the installed script made from it."""
    declaration = re.search(r'^gpucloud-nb = "([^"]+)"$', (ROOT / "pyproject.toml").read_text(),
                            re.MULTILINE)
    assert declaration, "pyproject.toml declares no gpucloud-nb script"
    target = declaration.group(1)
    module, _, function = target.partition(":")
    declared = [sys.executable, "-c",
                f"import sys; from {module} import {function}; sys.exit({function}())"]
    commands = [declared]
    script = Path(sys.executable).parent / "gpucloud-nb"
    installed = [e.value for e in entry_points(group="console_scripts", name="gpucloud-nb")]
    if script.exists() and installed == [target]:  # an older install names an older target
        commands.append([str(script)])
    for command in commands:
        started = time.monotonic()
        result = subprocess.run([*command, "--help"], capture_output=True, text=True, timeout=20,
                                cwd=ROOT)
        assert result.returncode == 0 and "sandbox" in result.stdout, result.stderr
        assert time.monotonic() - started < 10


def test_a_foreign_state_file_is_one_line_and_status_2(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "other.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE notes (body TEXT)")
    db.close()
    before = path.read_bytes()
    result = subprocess.run(
        [sys.executable, "-m", "gpucloud_nb", "sandbox", "--port", "0", "--state", str(path)],
        capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "belongs to another program" in lines[0], result.stderr
    assert path.read_bytes() == before


def sandbox_action(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpucloud_nb", "sandbox", *args],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)


def test_status_and_stop_find_a_service_whose_runtime_file_cannot_be_read(
        sandbox_home: Path) -> None:
    home = str(sandbox_home)
    runtime = service.find_or_start(sandbox_home, launch_seconds=0.1)
    spoilt = sandbox_home / service.RUNTIME_FILE
    spoilt.write_text("{half a runt")  # root reads any file: a spoilt one is unreadable to all
    spoilt.chmod(0)
    shown = sandbox_action("status", "--home", home)
    assert shown.returncode == 1 and shown.stdout == ""
    assert shown.stderr == (
        f"gpucloud-nb sandbox: error: a sandbox service runs in {home} (pid {runtime.pid}) but "
        f"cannot be verified (its runtime file {spoilt} is missing or unreadable, or it does "
        "not answer); `gpucloud-nb sandbox stop` stops it.\n")
    stopped = sandbox_action("stop", "--home", home)
    assert stopped.returncode == 0, stopped.stderr
    assert stopped.stdout == (f"Stopped the sandbox service (pid {runtime.pid}); its state "
                              f"stays in {home}.\n")
    assert not processes.pid_alive(runtime.pid) and processes.lock_holder(sandbox_home) is None
    assert sandbox_action("status", "--home", home).returncode == 3


def test_a_full_disk_at_sandbox_start_is_one_sentence(sandbox_home: Path) -> None:
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full to make the disk full with")
    (sandbox_home / service.LOG_FILE).symlink_to("/dev/full")  # every write: ENOSPC
    started = sandbox_action("start", "--home", str(sandbox_home))
    assert started.returncode == 1 and started.stdout == ""
    assert started.stderr == (
        f"gpucloud-nb sandbox: error: The sandbox service cannot start: writing in its home "
        f"{sandbox_home} failed (no space left on device); free space there or set "
        "GPUCLOUD_SANDBOX_HOME to a writable directory.\n")
    assert processes.lock_holder(sandbox_home) is None  # nothing was left half started


@pytest.mark.parametrize("body", [[], "fine", 42, None])
def test_a_status_answer_that_is_not_a_json_object_is_one_sentence(
        sandbox_home: Path, body: object, capsys: pytest.CaptureFixture[str]) -> None:
    service.credentials(sandbox_home)  # the home's secrets, as its service makes them
    lock = processes.service_lock(sandbox_home)  # a verified service: it holds the lock ...
    assert lock is not None
    try:  # ... and answers the challenge (it knows the home's secret)
        with FakeService(pid=os.getpid(), secret=service.challenge_secret(sandbox_home),
                         status=body) as fake:
            service.write_runtime(sandbox_home, service.Runtime(
                fake.url, f"{fake.url}/inference", os.getpid(), "its-key-0123456789",
                "its-secret-0123456789", time.time(), 3.0, str(sandbox_home)))
            assert main(["sandbox", "status", "--home", str(sandbox_home)]) == 1
    finally:
        lock.close()
    assert [path.split("?")[0] for path, _ in fake.requests] == ["/sandbox/challenge",
                                                                 "/sandbox/status"]
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == (
        "gpucloud-nb sandbox: error: the service did not report its status (its answer is JSON "
        "but not an object).\n")


def test_a_home_the_service_cannot_write_its_settings_in_is_one_line(sandbox_home: Path) -> None:
    (sandbox_home / service.SETTINGS_FILE).mkdir()  # its settings cannot be written there
    served = sandbox_action("--home", str(sandbox_home), "--port", "0")
    assert served.returncode == 1 and served.stdout == ""
    assert served.stderr == (f"gpucloud-nb sandbox: error: cannot write in the sandbox home "
                             f"{sandbox_home}: Is a directory.\n")


def test_a_class_is_sent_to_the_gateway_in_one_sentence(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The sandbox is only the cloud: a class (keys, budgets, the teacher) is a gateway's."""
    keys = tmp_path / "class.txt"
    keys.write_text("student-a-key-0123456789 20 Ada\n", encoding="utf-8")
    assert main(["sandbox", "--keys", str(keys)]) == 2
    err = capsys.readouterr().err
    assert err == f"gpucloud-nb sandbox: error: --keys: {KEYS_MOVED}\n"
    assert "use `gpucloud-nb gateway --keys FILE`" in err and err.count("\n") == 1
    assert "student-a-key" not in err
    with pytest.raises(SystemExit):  # no sandbox `class` action: `gpucloud-nb gateway class`
        main(["sandbox", "class"])
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(["sandbox", "--help"])
    shown = capsys.readouterr().out
    assert not any(gone in shown for gone in ("--keys", "--teacher-key", "--shared-shell",
                                              "`class`"))
