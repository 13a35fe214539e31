"""The per-user sandbox service, over real processes: one per home, shared, durable, stoppable.

Every test has a home of its own (the ``sandbox_home`` fixture), whose service is stopped at
teardown; the run's session hook checks that no service outlives the suite.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from helpers import FakeService, as_other_user, launch, wait_for

from gpucloud_nb import GPUCloud, connect
from gpucloud_nb.errors import ConnectionFailedError
from gpucloud_nb.gateway import personal
from gpucloud_nb.sandbox import Sandbox, SandboxConfig, processes, service
from gpucloud_nb.sandbox.cli import main

pytestmark = pytest.mark.timeout(120)
HELPERS = str(Path(__file__).with_name("helpers.py"))

LAUNCH = textwrap.dedent("""
    from gpucloud_nb import connect
    cloud = connect(quiet=True)
    offer = cloud.instances.offers(deployment_type="vm", available=True, sort="price")[0]
    instance = cloud.instances.create(
        name={name!r}, cloud_provider=offer.cloud.id, instance_id=offer.instance_id,
        region=offer.available_regions[0], vm={{"os": offer.configuration.os[0]}}, **{extra})
    print(instance.id, cloud.sandbox.pid, cloud.base_url)
""")


def python(code: str, timeout: float = 60) -> str:
    """Run ``code`` in a new Python process (inheriting the test's home); return its stdout."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, done.stderr
    return done.stdout


def launch_in_a_process(name: str, **extra: object) -> tuple[str, int, str]:
    instance_id, pid, url = python(LAUNCH.format(name=name, extra=extra)).split()
    return instance_id, int(pid), url


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpucloud_nb", "sandbox", *args],
                          capture_output=True, text=True, timeout=60)


def create_volume(cloud: GPUCloud):
    offer = cloud.volumes.offers()[0]
    return cloud.volumes.create(name="notes", cloud_provider=offer.cloud_provider.id,
                                region=offer.regions[0], size_in_gb=offer.min_size_in_gb)


def status(runtime: service.Runtime) -> dict:
    return httpx.get(f"{runtime.management_url}/sandbox/status",
                     headers={"x-api-key": runtime.api_key}).json()


@pytest.fixture
def fast(monkeypatch: pytest.MonkeyPatch, sandbox_home: Path) -> Path:
    """A fresh home whose service launches instances in 0.3 s."""
    monkeypatch.setenv("GPUCLOUD_SANDBOX_LAUNCH_SECONDS", "0.3")
    return sandbox_home


def test_two_processes_connecting_at_once_share_one_service(fast: Path, service_processes) -> None:
    start_at = time.time() + 2.0  # both processes are up by then, and call connect() together
    code = textwrap.dedent(f"""
        import time
        from gpucloud_nb import connect
        time.sleep(max({start_at} - time.time(), 0))
        cloud = connect(quiet=True)
        print(cloud.sandbox.pid, cloud.base_url)
    """)
    processes = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for _ in range(2)]
    answers = [process.communicate(timeout=90) for process in processes]
    assert all(process.returncode == 0 for process in processes), [err for _, err in answers]
    assert answers[0][0] == answers[1][0]
    assert len(service_processes(fast)) == 1


def test_an_instance_outlives_the_process_that_launched_it_and_keeps_billing(fast: Path) -> None:
    instance_id, pid, url = launch_in_a_process("from-a")  # A exits without cleanup_on_exit
    listed = python(textwrap.dedent(f"""
        import time
        from gpucloud_nb import connect
        cloud = connect(quiet=True)
        cloud.instances.wait_until_active({instance_id!r}, timeout=30)
        print(cloud.sandbox.pid, cloud.base_url, [(i.id, i.status) for i in cloud.instances.list()])
    """))
    assert listed.split()[:2] == [str(pid), url]
    assert f"('{instance_id}', 'active')" in listed
    runtime = service.find(fast)
    assert runtime is not None and runtime.pid == pid
    first = status(runtime)["spend"]
    time.sleep(1.0)  # no kernel is connected now
    assert status(runtime)["spend"] > first > 0


def test_kill_9_then_connect_starts_a_new_service_with_every_resource(fast: Path) -> None:
    instance_id, pid, url = launch_in_a_process("durable", delete_after=3600)
    cloud = connect(quiet=True)
    volume = create_volume(cloud)
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while processes.pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert service.find(fast) is None  # the runtime file is stale now

    again = connect(quiet=True)
    assert again.sandbox.pid != pid
    assert again.base_url == url  # the remembered port was free: old clients keep working
    assert instance_id in [i.id for i in cloud.instances.list()]
    assert again.instances.get(instance_id).status == "active"
    assert again.auto_delete.remaining(instance_id) > 3500
    assert again.volumes.get(volume.id).name == "notes"


def test_a_stale_runtime_file_with_a_dead_pid_is_replaced(fast: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = service.Runtime("http://127.0.0.1:9", "http://127.0.0.1:9/inference", dead.pid,
                            "stale-key", "stale-secret", time.time(), 3.0, str(fast))
    service.write_runtime(fast, stale)
    cloud = connect(quiet=True)
    assert cloud.sandbox.pid != dead.pid and cloud.volumes.list() == []
    assert service.read_runtime(fast) == cloud.sandbox


def test_a_stale_runtime_file_whose_port_does_not_answer_is_replaced(fast: Path) -> None:
    unrelated = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        stale = service.Runtime("http://127.0.0.1:9", "http://127.0.0.1:9/inference",
                                unrelated.pid, "stale-key", "stale-secret", time.time(), 3.0,
                                str(fast))
        service.write_runtime(fast, stale)
        cloud = connect(quiet=True)
        assert cloud.sandbox.pid != unrelated.pid and cloud.volumes.list() == []
        assert unrelated.poll() is None  # an unrelated live process is left alone
    finally:
        unrelated.kill()
        unrelated.wait()


def test_runtime_file_is_0600_and_home_0700(fast: Path) -> None:
    pid = connect(quiet=True).sandbox.pid
    assert (fast / "service.lock").read_text() == str(pid)  # the pid file of its lock
    assert processes.lock_holder(fast) == pid
    assert stat.S_IMODE((fast / service.RUNTIME_FILE).stat().st_mode) == 0o600
    assert stat.S_IMODE(fast.stat().st_mode) == 0o700
    text = (fast / service.RUNTIME_FILE).read_text()
    assert set(json.loads(text)) >= {"management_url", "pid", "api_key", "inference_secret"}


def test_cli_start_status_stop_reset_and_logs(sandbox_home: Path) -> None:
    home = str(sandbox_home)
    started = cli("start", "--home", home, "--launch-seconds", "0.1")
    assert started.returncode == 0, started.stderr
    url = started.stdout.splitlines()[0].split(": ", 1)[1]
    runtime = service.find(sandbox_home)
    assert runtime is not None and runtime.management_url == url
    cloud = GPUCloud(api_key=runtime.api_key, base_url=url)
    instance = launch(cloud, "kept")
    time.sleep(0.3)

    shown = cli("status", "--home", home)
    assert shown.returncode == 0, shown.stderr
    assert f"running at {url} (pid {runtime.pid})" in shown.stdout
    assert "instances: 1 active" in shown.stdout and "volumes: 0" in shown.stdout
    assert "spend so far: $" in shown.stdout and runtime.api_key not in shown.stdout

    logs = cli("logs", "--home", home, "-n", "5")
    assert logs.returncode == 0 and 0 < len(logs.stdout.splitlines()) <= 5
    assert runtime.api_key not in (sandbox_home / service.LOG_FILE).read_text()

    stopped = cli("stop", "--home", home)
    assert stopped.stdout.startswith(f"Stopped the sandbox service (pid {runtime.pid})")
    assert not processes.pid_alive(runtime.pid) and service.find(sandbox_home) is None
    assert cli("status", "--home", home).stdout.startswith("No sandbox service is running")
    assert cli("start", "--home", home).returncode == 0
    assert cloud.instances.get(instance.id).status == "active"  # state kept, same port and key

    refused = cli("reset", "--home", home)
    assert refused.returncode == 2 and "--yes" in refused.stderr
    assert refused.stderr.count("\n") == 1 and "Traceback" not in refused.stderr
    assert [i.id for i in cloud.instances.list()] == [instance.id]
    machines = sandbox_home.with_name(f"{sandbox_home.name}-machines")
    instance_home = machines / "instances" / instance.id
    wait_for(instance_home.is_dir, timeout=30)
    (instance_home / "notebook.ipynb").write_text("{}")  # a synced notebook, say
    (machines / "volumes" / "65a1f00d").mkdir(parents=True)  # a volume's files
    reset = cli("reset", "--yes", "--home", home)
    assert reset.returncode == 0, reset.stderr
    assert cloud.instances.list() == []  # the service runs again, on the same port, empty
    assert not instance_home.exists() and not (machines / "volumes" / "65a1f00d").exists()
    assert cli("stop", "--home", home).returncode == 0
    assert cli("stop", "--home", home).stdout.startswith("No sandbox service is running")


def test_two_keys_on_one_server_never_see_each_others_resources(
        sandbox_factory: Callable[..., Sandbox]) -> None:
    """Two accounts of one cloud (a class's isolation is its gateway's, test_gateway.py)."""
    box = sandbox_factory(api_key="student-a-key-0123456789", keys=("student-b-key-0123456789",),
                          launch_seconds=0.1)
    with GPUCloud(api_key="student-a-key-0123456789", base_url=box.management_url) as a, \
            GPUCloud(api_key="student-b-key-0123456789", base_url=box.management_url) as b:
        instance = launch(a, "mine")
        volume = create_volume(a)
        assert b.instances.list() == [] and b.volumes.list() == []
        for request in (lambda: b.instances.get(instance.id), lambda: b.instances.delete(instance.id),
                        lambda: b.volumes.get(volume.id), lambda: b.volumes.delete(volume.id)):
            with pytest.raises(Exception, match="not found"):
                request()
        assert [i.id for i in a.instances.list()] == [instance.id]
        other = httpx.get(f"{box.management_url}/gpu-cloud/instances",
                          headers={"x-api-key": "sandbox-key"})
        assert other.status_code == 403  # the public default key is no account here


@pytest.mark.parametrize("options", [{}, {"GPUCLOUD_SANDBOX_API_KEY": "teacher-key-0123"},
                                     {"GPUCLOUD_SANDBOX_INFERENCE_SECRET": "class-secret-0123"},
                                     {"GPUCLOUD_SANDBOX_API_KEY": "sandbox-key",
                                      "GPUCLOUD_SANDBOX_INFERENCE_SECRET": "s-0123"}])
def test_binding_beyond_loopback_needs_a_custom_key_and_secret(
        options: dict[str, str], capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("GPUCLOUD_SANDBOX_API_KEY", "GPUCLOUD_SANDBOX_INFERENCE_SECRET"):
        monkeypatch.delenv(name, raising=False)
    for name, value in options.items():
        monkeypatch.setenv(name, value)
    assert main(["sandbox", "--host", "0.0.0.0", "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert "Refusing to serve on 0.0.0.0, beyond loopback" in err
    assert err.count("\n") == 1 and "Traceback" not in err
    SandboxConfig(host="0.0.0.0", api_key="teacher-key-0123", inference_secret="class-secret-0123")
    SandboxConfig(host="127.0.0.5")  # any loopback address keeps the public defaults


def test_a_service_that_cannot_start_is_one_sentence_with_its_log(sandbox_home: Path) -> None:
    with pytest.raises(Exception) as failed:
        service.find_or_start(sandbox_home, launch_seconds=-1.0, timeout=20)
    text = str(failed.value)
    assert text.startswith(f"The sandbox service in {sandbox_home} exited with status 2")
    assert "launch-seconds" in text  # the end of the log says why


def test_a_running_service_keeps_its_settings_and_says_so(
        fast: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    first = connect()
    monkeypatch.setenv("GPUCLOUD_SANDBOX_LAUNCH_SECONDS", "7")
    second = connect()
    out = capsys.readouterr().out
    assert second.sandbox.pid == first.sandbox.pid and second.sandbox.launch_seconds == 0.3
    assert "already running and keeps its own launch_seconds" in out


def test_timers_fire_after_the_kernel_is_gone(fast: Path) -> None:
    instance_id, _, _ = launch_in_a_process("timed", delete_after=1.0)
    cloud = connect(quiet=True)
    assert cloud.auto_delete.where == "gateway"  # the personal gateway in front of the sandbox
    deadline = time.monotonic() + 30
    while cloud.instances.get(instance_id).status not in ("deleting", "deleted"):
        assert time.monotonic() < deadline, "the gateway's timer did not fire"
        time.sleep(0.2)
    assert cloud.auto_delete.remaining(instance_id) is None


def test_keyless_connect_talks_through_a_personal_gateway_that_keeps_every_money_rule(
        fast: Path, own_home: Path) -> None:
    cloud = connect(quiet=True)
    box = cloud.sandbox
    assert cloud.is_sandbox and cloud.base_url != box.management_url
    assert cloud.gateway_status() is not None  # GET /gateway/me answers: a gateway
    assert {cloud.auto_delete.where, cloud.budgets.where, cloud.idle_delete.where} == {"gateway"}
    instance = launch(cloud, "kept", delete_after=3600, budget=5, delete_when_idle=600)
    assert cloud.auto_delete.remaining(instance.id) > 3500
    assert cloud.budgets.states()[instance.id].dollars == 5
    assert instance.id in cloud.idle_delete.states()
    cloud.instances.wait_until_active(instance.id, timeout=30)
    # SSH keys go to the sandbox itself (POST /sandbox/ssh-keys), not to the gateway
    assert cloud.instances.run(instance.id, "echo hello").stdout.strip() == "hello"
    with GPUCloud(api_key=box.api_key, base_url=box.management_url) as direct:
        assert [i.id for i in direct.instances.list()] == [instance.id]  # one account
    cloud.close()


def test_a_sandbox_restarted_on_another_port_keeps_its_gateways_timers(fast: Path) -> None:
    cloud = connect(quiet=True)
    instance = launch(cloud, "timed", delete_after=3600)
    gateway = gateway_running(cloud.sandbox)
    assert gateway is not None
    old = killed_leaving_its_runtime_file(fast)  # and the gateway in front ended with it
    port = int(old.management_url.rsplit(":", 1)[1])
    with FakeService(port, pid=os.getpid()) as fake:  # the old port is taken: a new one is chosen
        again = connect(quiet=True)
    assert again.sandbox.management_url != old.management_url
    assert gateway_running(again.sandbox) not in (None, gateway)  # the same home's, again
    assert again.auto_delete.remaining(instance.id) > 3500  # its state kept
    assert not carried_a_secret(fake.requests, old)
    assert again.instances.get(instance.id).status == "active"


def test_cleanup_on_exit_still_deletes_what_the_process_launched(fast: Path) -> None:
    kept_id, _, _ = launch_in_a_process("kept")
    code = LAUNCH.format(name="cleaned", extra={}).replace(
        "connect(quiet=True)", "connect(quiet=True, cleanup_on_exit=True)")
    cleaned_id = python(code).split()[0]
    cloud = connect(quiet=True)
    assert cloud.instances.get(cleaned_id).status in ("deleting", "deleted")
    assert cloud.instances.get(kept_id).status in ("pending", "active")


def test_a_hung_service_is_replaced(fast: Path) -> None:
    hung = connect(quiet=True).sandbox
    os.kill(hung.pid, signal.SIGSTOP)  # holds its lock and port, answers nothing
    try:
        cloud = connect(quiet=True)
        assert cloud.sandbox.pid != hung.pid and not processes.pid_alive(hung.pid)
        assert cloud.volumes.list() == []
    finally:
        if processes.pid_alive(hung.pid):
            os.kill(hung.pid, signal.SIGKILL)


def gateway_running(box: service.Runtime) -> int | None:
    """The pid of the personal gateway running in front of ``box`` (connect()'s), if any."""
    return service.running_pid(personal.sandbox_home(box.home, box.api_key))


def killed_leaving_its_runtime_file(home: Path) -> service.Runtime:
    """Start the home's service, kill -9 it (its runtime file stays); return what it was."""
    old = connect(quiet=True).sandbox
    os.kill(old.pid, signal.SIGKILL)
    wait_for(lambda: not processes.pid_alive(old.pid), 10)
    wait_for(lambda: gateway_running(old) is None, 10)  # the gateway in front ends with it
    # A child the service forked an instant before (a process-tree measure) can hold the lock
    # until it execs: wait for it to be free, as a restart after a crash would find it.
    wait_for(lambda: processes.lock_holder(home) is None, 10)
    assert service.read_runtime(home) == old
    return old


def claim(home: Path, old: service.Runtime, pid: int) -> None:
    """Point the left-behind runtime file at ``pid``, as pid reuse would."""
    service.write_runtime(home, dataclasses.replace(old, pid=pid))


def carried_a_secret(requests: list, old: service.Runtime) -> bool:
    seen = json.dumps(requests)
    return old.api_key in seen or old.inference_secret in seen


@pytest.mark.parametrize("impostor", ["same user", "another user"])
def test_connect_never_sends_the_key_to_an_impostor_on_the_old_port(
        fast: Path, impostor: str, service_processes) -> None:
    command = as_other_user([sys.executable, HELPERS, "0"]) if impostor == "another user" else []
    old = killed_leaving_its_runtime_file(fast)
    port = int(old.management_url.rsplit(":", 1)[1])
    if impostor == "same user":  # a live pid of ours that is not the service: this process
        with FakeService(port, pid=os.getpid()) as fake:
            claim(fast, old, os.getpid())
            cloud = connect(quiet=True)
        requests, impostor_pid = fake.requests, os.getpid()
    else:  # a process of another user on the old port, whose pid the runtime file names
        process = subprocess.Popen([*command[:-1], str(port)], stdout=subprocess.PIPE, text=True)
        try:
            assert process.stdout is not None
            assert process.stdout.readline() == f"listening {port}\n"
            claim(fast, old, process.pid)
            cloud = connect(quiet=True)
        finally:
            process.terminate()
            out, _ = process.communicate(timeout=10)
        requests, impostor_pid = [json.loads(line) for line in out.splitlines()], process.pid
    assert not carried_a_secret(requests, old), [path for path, _ in requests]
    assert cloud.sandbox.pid not in (old.pid, impostor_pid)
    assert cloud.base_url != old.management_url  # the impostor kept the old port
    assert [p.pid for p in service_processes(fast)] == [cloud.sandbox.pid]
    assert cloud.volumes.list() == [] and service.find(fast) == cloud.sandbox


def test_an_impostor_holding_the_lock_gets_a_challenge_without_the_key_and_is_refused(
        fast: Path) -> None:
    old = killed_leaving_its_runtime_file(fast)
    port = int(old.management_url.rsplit(":", 1)[1])
    lock = processes.service_lock(fast)  # held by this process, whose pid the runtime file names
    assert lock is not None
    try:
        with FakeService(port, pid=os.getpid()) as fake:
            claim(fast, old, os.getpid())
            with pytest.raises(ConnectionFailedError, match="holds .*service.lock but does not "
                                                            "answer") as refused:
                connect(quiet=True)
    finally:
        lock.close()
    assert "\n" not in str(refused.value)
    assert fake.requests and {urlsplit(path).path for path, _ in fake.requests} \
        == {"/sandbox/challenge"}
    assert not carried_a_secret(fake.requests, old)
    assert all("x-api-key" not in {h.lower() for h in headers} for _, headers in fake.requests)
