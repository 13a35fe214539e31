"""delete_when_idle= at create, and cloud.idle_delete, against the sandbox (seconds, not minutes).

The kernel watcher's tests use a client that does not know it talks to a sandbox (the real
cloud's path: the limits file, this process's thread, real SSH to the instance), with limits of
a few seconds and a poll of half a second.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import psutil
import pytest
from helpers import (
    OTHER_UID,
    as_other_user,
    connected,
    deaf_to,
    echo_port,
    open_kernel,
    wait_for,
)

from gpucloud_nb import AsyncGPUCloud, GPUCloud
from gpucloud_nb.client.idle import THRESHOLD, IdleClocks, KernelIdleDelete, parse_use
from gpucloud_nb.client.idle_file import IdleLimits, account
from gpucloud_nb.errors import GPUCloudError, InvalidInputError
from gpucloud_nb.kernel import install_kernel
from gpucloud_nb.sandbox import Sandbox
from gpucloud_nb.sandbox.idle import POLL


def file_of(sandbox: Sandbox, key: str | None = None) -> IdleLimits:
    """The limits file of an account of ``sandbox`` (its first key unless told), as any process
    of this user finds it."""
    url = sandbox.management_url
    return IdleLimits(url, account(url, key or sandbox.api_key))


def launch(cloud: GPUCloud, name: str = "idle", **extra: Any) -> Any:
    offer = cloud.instances.offers(deployment_type="vm", available=True, sort="price")[0]
    return cloud.instances.create(
        name=name, cloud_provider=offer.cloud.id, instance_id=offer.instance_id,
        region=offer.available_regions[0], vm={"os": offer.configuration.os[0]}, **extra)


def wait_gone(cloud: GPUCloud, instance_id: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cloud.instances.get(instance_id).status in ("deleting", "deleted"):
            return True
        time.sleep(0.05)
    return False


def test_delete_when_idle_deletes_an_unused_sandbox_instance(box: GPUCloud,
                                                             observer: GPUCloud) -> None:
    instance = launch(box, delete_when_idle=timedelta(seconds=2))
    assert box.idle_delete.where == "sandbox service"
    state = box.idle_delete.states()[instance.id]
    assert state.limit == 2 and 0 < state.deletes_in <= 2 and not state.warning
    box.instances.wait_until_active(instance.id, timeout=30)
    assert wait_gone(observer, instance.id, 2 + POLL + 3)
    assert box.idle_delete.states() == {}


def test_keep_and_cancel(box: GPUCloud) -> None:
    instance = launch(box, delete_when_idle=3)  # seconds, as delete_after
    box.instances.wait_until_active(instance.id, timeout=30)
    time.sleep(1.8)
    warned = box.idle_delete.states()[instance.id]
    assert warned.warning and warned.idle >= 1.5
    kept = box.idle_delete.keep(instance.id)
    assert not kept.warning and kept.idle < 0.5 and kept.delete_at > warned.delete_at
    assert box.idle_delete.cancel(instance.id) and not box.idle_delete.cancel(instance.id)
    time.sleep(3 + POLL)
    assert box.instances.get(instance.id).status == "active"


@pytest.mark.parametrize("bad", [0, -5, "30", True, float("nan"), float("inf")])
def test_a_bad_limit_is_refused_before_anything_is_sent(box: GPUCloud, bad: object) -> None:
    with pytest.raises(InvalidInputError, match="delete_when_idle must be a positive number of "
                                                "seconds or a timedelta"):
        launch(box, delete_when_idle=bad)
    assert box.instances.list() == []


def test_on_the_real_cloud_the_limit_goes_to_the_lab_extensions_file(sandbox: Sandbox) -> None:
    # A client that does not know it talks to the sandbox behaves as on the real cloud.
    with GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url) as cloud:
        assert isinstance(cloud.idle_delete, KernelIdleDelete)
        assert cloud.idle_delete.where == ("JupyterLab server extension while JupyterLab runs, "
                                           "else this kernel")
        instance = launch(cloud, delete_when_idle=1800)
        file = file_of(sandbox)
        limits = file.limits()
        assert limits[instance.id]["seconds"] == 1800
        assert file.path == cloud.idle_delete.path and file.path.is_file()
        assert sandbox.api_key not in str(file.path)
        before = limits[instance.id]["keptAt"]
        time.sleep(0.01)
        cloud.idle_delete.keep(instance.id)
        assert file.limits()[instance.id]["keptAt"] > before
        cloud.instances.delete(instance.id)  # a deleted instance is watched no more
        assert instance.id not in file.limits()
        with pytest.raises(InvalidInputError, match="is not deleted when idle"):
            cloud.idle_delete.keep(instance.id)


def test_the_async_client_takes_delete_when_idle(sandbox: Sandbox) -> None:
    async def main() -> str:
        async with AsyncGPUCloud(api_key=sandbox.api_key,
                                 base_url=sandbox.management_url) as cloud:
            cloud.sandbox = sandbox
            offer = (await cloud.instances.offers(deployment_type="vm", available=True))[0]
            instance = await cloud.instances.create(
                name="async-idle", cloud_provider=offer.cloud.id, instance_id=offer.instance_id,
                region=offer.available_regions[0], vm={"os": offer.configuration.os[0]},
                delete_when_idle=timedelta(seconds=1))
            return instance.id

    instance_id = asyncio.run(main())
    with GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url) as cloud:
        assert wait_gone(cloud, instance_id, 1 + POLL + 4)


# -- the real cloud without JupyterLab: this kernel watches --------------------------------------

LOOP = "nohup sh -c 'while :; do :; done' >/dev/null 2>&1 & echo $!"
POLL_HERE = 0.5



@pytest.fixture
def kernel(sandbox: Sandbox, own_home: Path) -> Iterator[GPUCloud]:
    """A real-cloud client of the sandbox whose idle watcher polls every half second."""
    cloud = GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url)
    watcher = cloud.idle_delete
    assert isinstance(watcher, KernelIdleDelete) and watcher.file.lab_watches() == set()
    watcher.poll = POLL_HERE
    yield cloud
    cloud.close()


def watcher_of(cloud: GPUCloud) -> KernelIdleDelete:
    watcher = cloud.idle_delete
    assert isinstance(watcher, KernelIdleDelete)
    return watcher


def active(cloud: GPUCloud, limit: float) -> tuple[str, float]:
    """A new instance deleted once idle ``limit`` seconds, active; its id and when its limit
    was asked for (its idle clock cannot start before)."""
    asked = time.monotonic()
    instance = launch(cloud, delete_when_idle=timedelta(seconds=limit))
    cloud.instances.wait_until_active(instance.id, timeout=30, poll_interval=0.05)
    return instance.id, asked


@contextlib.contextmanager
def busy_loop(cloud: GPUCloud, instance_id: str) -> Iterator[int]:
    """A busy loop on the instance (a process of this machine, in the sandbox), killed after."""
    pid = int(cloud.instances.run(instance_id, LOOP).stdout.strip())
    try:
        yield pid
    finally:
        with contextlib.suppress(psutil.Error):
            process = psutil.Process(pid)
            if "while" in " ".join(process.cmdline()):
                os.kill(pid, signal.SIGKILL)


def test_parse_use_reads_every_gpu_and_skips_noise() -> None:
    assert parse_use("100, 2048\n50, 0\n") == (75.0, 100.0, 2048.0)
    assert parse_use("No devices were found\n") is None


SET_MANY = """
import sys
from gpucloud_nb.client.idle import IdleLimits
limits = IdleLimits(sys.argv[1], "one-account")
for n in range(150):
    limits.set(f"{sys.argv[2]}-{n}", 60.0)
"""


def test_two_kernels_setting_limits_at_once_lose_none() -> None:
    """Each write reads the file, changes it and writes it back: without a lock between
    processes, one kernel's limit could vanish and its instance bill on."""
    url = "http://127.0.0.1:9/two-kernels"
    writers = [subprocess.Popen([sys.executable, "-c", SET_MANY, url, name])
               for name in ("first", "second")]
    IdleLimits(url, "one-account").set("this-one", 30.0)
    for writer in writers:
        assert writer.wait(timeout=120) == 0
    limits = IdleLimits(url, "one-account").limits()
    assert len(limits) == 301 and limits["this-one"]["seconds"] == 30.0


def test_the_clocks_start_late_rather_than_early_and_honour_a_keep() -> None:
    clocks = IdleClocks()
    limit = {"i-1": {"seconds": 60.0, "keptAt": 900.0}}
    assert clocks.step(limit, busy=set(), now=1000) == []  # first seen at 1000, not 900
    assert clocks.step(limit, busy=set(), now=1059) == []
    assert clocks.step({"i-1": {"seconds": 60.0, "keptAt": 1050.0}}, busy=set(), now=1100) == []
    assert clocks.step(limit, busy={"i-1"}, now=1150) == []
    assert clocks.step(limit, busy=set(), now=1210) == ["i-1"]
    assert clocks.step({}, busy=set(), now=1211) == [] and clocks.clocks == {}


def test_without_jupyterlab_this_kernel_deletes_an_unused_instance_and_confirms_it(
        kernel: GPUCloud, observer: GPUCloud, caplog: pytest.LogCaptureFixture) -> None:
    watcher = watcher_of(kernel)
    # Another process's limit (as another kernel writes it) is that process's to watch.
    theirs = observer.instances.wait_until_active(launch(observer, "theirs").id, timeout=30).id
    watcher.file.set(theirs, 1.0)
    with caplog.at_level(logging.INFO, logger="gpucloud_nb.idle"):
        instance_id, asked = active(kernel, 2)
        up = time.monotonic()
        assert wait_gone(observer, instance_id, 2 + POLL_HERE + 10)
        gone = time.monotonic()
        # The cloud may show the delete an instant before the watcher's thread logs and notes
        # it: wait while INFO is still captured.
        wait_for(lambda: instance_id in watcher.deleted, timeout=5)
    assert observer.instances.get(theirs).status == "active"
    # Never before the limit; after it is active, within the limit and a poll (and a measure,
    # which takes seconds when 4 test processes share 2 cores).
    assert gone - asked >= 2 and gone - up <= 2 + POLL_HERE + 8
    assert watcher.failures == {}
    assert watcher.states() == {} and instance_id not in watcher.limits()
    said = [record.getMessage() for record in caplog.records]
    warned = next(i for i, line in enumerate(said) if line.startswith(
        f"Instance {instance_id} has been idle for ") and "unless it is used or kept" in line)
    deleted = next(i for i, line in enumerate(said)
                   if line.startswith(f"Deleted instance {instance_id}: idle"))
    assert warned < deleted  # the warning (half-way, for so short a limit) came first


def test_a_busy_loop_keeps_the_instance_past_its_limit(kernel: GPUCloud,
                                                       observer: GPUCloud) -> None:
    watcher = watcher_of(kernel)
    instance_id, _ = active(kernel, 2)
    with busy_loop(kernel, instance_id) as pid:
        time.sleep(2 + 4 * POLL_HERE)
        assert observer.instances.get(instance_id).status == "active"
        state = watcher.states()[instance_id]
        assert state.gpu_util is not None and state.gpu_util >= THRESHOLD and state.idle < 2
        os.kill(pid, signal.SIGKILL)  # the loop stops: now it idles away
        assert wait_gone(observer, instance_id, 2 + POLL_HERE + 10)
    wait_for(lambda: instance_id in watcher.deleted, timeout=5)


def test_an_open_run_of_this_process_keeps_the_instance(kernel: GPUCloud,
                                                        observer: GPUCloud) -> None:
    watcher = watcher_of(kernel)
    instance_id, _ = active(kernel, 1.5)
    remote, _ = kernel.instances.ssh(instance_id)
    holding = threading.Thread(target=kernel.instances.run, args=(instance_id, "sleep 6"))
    holding.start()  # no CPU, no GPU: only the open command says it is in use
    try:
        time.sleep(1.5 + 4 * POLL_HERE)
        assert remote.open_on(instance_id) == 1
        assert observer.instances.get(instance_id).status == "active"
        assert watcher.states()[instance_id].idle < 1.5
    finally:
        holding.join(10)
    assert remote.open_on(instance_id) == 0
    assert wait_gone(observer, instance_id, 1.5 + POLL_HERE + 10)  # closed: it idles away


def test_a_fresh_lab_heartbeat_makes_the_kernel_stand_aside_and_a_stale_one_lets_it_act(
        kernel: GPUCloud, observer: GPUCloud, sandbox: Sandbox) -> None:
    watcher = watcher_of(kernel)
    lab = file_of(sandbox)  # JupyterLab of the same account
    instance_id = launch(kernel, delete_when_idle=1).id
    lab.beat(30, {instance_id})  # JupyterLab polls every 30 s and watches it: fresh for 90 s
    assert watcher.lab_watches(instance_id)
    kernel.instances.wait_until_active(instance_id, timeout=30, poll_interval=0.05)
    time.sleep(1 + 5 * POLL_HERE)
    assert observer.instances.get(instance_id).status == "active"  # left to JupyterLab
    assert watcher.states() == {} and watcher.deleted == {}
    lab.beat(0.2, {instance_id})  # then JupyterLab stops: stale 0.6 s after this beat
    stale = time.monotonic()
    assert wait_gone(observer, instance_id, 0.6 + 1 + POLL_HERE + 10)
    # The kernel took over with a fresh clock: the whole limit after the beat went stale.
    assert time.monotonic() - stale >= 0.6 + 1 - POLL_HERE
    wait_for(lambda: instance_id in watcher.deleted, timeout=5)
    assert not watcher.lab_watches(instance_id)


def test_keep_from_this_kernel_or_from_the_lab_resets_the_kernels_clock(
        kernel: GPUCloud, observer: GPUCloud, sandbox: Sandbox) -> None:
    watcher = watcher_of(kernel)
    instance_id, _ = active(kernel, 4)
    wait_for(lambda: instance_id in watcher.states() and watcher.states()[instance_id].warning,
             timeout=4 + 2)  # half-way, for so short a limit
    first_due = watcher.states()[instance_id].delete_at
    watcher.keep(instance_id)
    kept = watcher.states()[instance_id]
    assert not kept.warning and kept.idle < 0.5 and kept.delete_at > first_due
    time.sleep(2)
    file_of(sandbox).keep(instance_id)  # the sidebar's Keep: the file only
    kept_again = time.monotonic()
    wait_for(lambda: watcher.states()[instance_id].idle < 1, timeout=2 * POLL_HERE + 2)
    # Past where the first Keep's clock would have deleted it (2 s after the second Keep, and a
    # poll), still within the second Keep's limit.
    time.sleep(max(kept_again + 3 - time.monotonic(), 0))
    assert observer.instances.get(instance_id).status == "active"
    assert wait_gone(observer, instance_id, 4 + POLL_HERE + 10)
    assert time.monotonic() - kept_again >= 4  # a whole limit after the last Keep


def test_the_async_clients_watcher_deletes_too(sandbox: Sandbox, own_home: Path,
                                               observer: GPUCloud) -> None:
    async def main() -> tuple[str, KernelIdleDelete]:
        async with AsyncGPUCloud(api_key=sandbox.api_key,
                                 base_url=sandbox.management_url) as cloud:
            watcher = cloud.idle_delete
            assert isinstance(watcher, KernelIdleDelete)
            watcher.poll = POLL_HERE
            offer = (await cloud.instances.offers(deployment_type="vm", available=True))[0]
            instance = await cloud.instances.create(
                name="async-kernel-idle", cloud_provider=offer.cloud.id,
                instance_id=offer.instance_id, region=offer.available_regions[0],
                vm={"os": offer.configuration.os[0]}, delete_when_idle=timedelta(seconds=1))
            deadline = time.monotonic() + 1 + POLL_HERE + 8
            while instance.id not in watcher.deleted and time.monotonic() < deadline:
                await asyncio.sleep(0.1)  # the loop stays free: the watcher is a thread
            return instance.id, watcher

    instance_id, watcher = asyncio.run(main())
    assert instance_id in watcher.deleted and watcher.failures == {}
    assert observer.instances.get(instance_id).status in ("deleting", "deleted")


def test_a_delete_never_confirmed_holds_up_no_other_idle_delete(
        sandbox: Sandbox, own_home: Path, observer: GPUCloud) -> None:
    deaf_id, other_id = (observer.instances.wait_until_active(launch(observer, name).id,
                                                              timeout=30).id
                         for name in ("deaf", "other"))
    confirm_within = 10.0
    with deaf_to(deaf_id) as transport, GPUCloud(
            api_key=sandbox.api_key, base_url=sandbox.management_url,
            transport=transport) as cloud:
        watcher = watcher_of(cloud)
        watcher.poll, watcher.confirm_within = POLL_HERE, confirm_within
        watcher.watch(deaf_id, timedelta(seconds=1))
        watcher.watch(other_id, timedelta(seconds=3))
        watched = time.monotonic()
        wait_for(lambda: deaf_id in watcher.deleted, timeout=1 + POLL_HERE + 8)
        deaf_noted = time.monotonic()
        # On time although the first delete is still being confirmed meanwhile (a measure
        # takes seconds when 4 test processes share 2 cores).
        assert wait_gone(observer, other_id, 3 + POLL_HERE + 6)
        assert time.monotonic() - watched < confirm_within
        assert deaf_id not in watcher.failures
        assert observer.instances.get(deaf_id).status == "active"
        wait_for(lambda: other_id in watcher.deleted, timeout=5)
        wait_for(lambda: deaf_id in watcher.failures, timeout=confirm_within + 5)
        assert time.monotonic() - deaf_noted >= confirm_within - 0.5
    assert watcher.failures == {deaf_id: (
        f"Instance {deaf_id} was idle for its limit and was deleted, but it is not deleting "
        "after 10 s; it may still be billing.")}


# -- the limits file: bad entries, a private folder, what fails before the create (#34) ---------

HUGE = "9" * 400  # an integer no float holds
DEEP = "[" * 100_000 + "]" * 100_000  # deeper than any recursive parser goes


def test_a_bad_entry_is_skipped_and_logged_and_the_other_limits_still_delete(
        kernel: GPUCloud, observer: GPUCloud, caplog: pytest.LogCaptureFixture) -> None:
    watcher = watcher_of(kernel)
    instance_id, _ = active(kernel, 2)
    good = json.dumps({"seconds": 2.0, "keptAt": time.time()})
    watcher.path.write_text(f'{{"huge": {{"seconds": {HUGE}}}, "deep": {{"seconds": {DEEP}}}, '
                            f'"{instance_id}": {good}, "text": "x"}}', encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="gpucloud_nb.idle"):
        assert wait_gone(observer, instance_id, 2 + POLL_HERE + 10)
        wait_for(lambda: instance_id in watcher.deleted, timeout=5)
    assert watcher.failures == {}
    skipped = [r.getMessage() for r in caplog.records if "was skipped" in r.getMessage()]
    assert sorted(line.split("'")[1] for line in skipped) == ["deep", "huge", "text"]  # once each
    assert all(line.endswith("it is not a limit (OverflowError).") for line in skipped
               if "'huge'" in line)
    assert watcher.limits() == {}  # the delete rewrote the file without them


@pytest.fixture
def shared_cache(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A cache dir under /tmp that another user may reach (pytest's own are private to us)."""
    base = Path(tempfile.mkdtemp(prefix="gpucloud-nb-idle-two-users-"))
    base.chmod(0o755)
    monkeypatch.setenv("XDG_CACHE_HOME", str(base / "cache"))
    yield base
    shutil.rmtree(base, ignore_errors=True)


HOLD = """
import fcntl, sys, time
try:
    lock = open(sys.argv[1])  # read-only is enough for flock
    fcntl.flock(lock, fcntl.LOCK_EX)
except OSError as error:
    print("refused", type(error).__name__, flush=True)
else:
    print("held", flush=True)
    time.sleep(120)
"""


def test_another_users_lock_holds_up_no_create_and_the_folder_is_made_private(
        sandbox: Sandbox, own_home: Path, shared_cache: Path, observer: GPUCloud) -> None:
    """#34: the lock file was 0644 in a 0755 folder, so another user could hold its flock and
    stall ``create(delete_when_idle=...)`` after the paid instance existed."""
    command = as_other_user([sys.executable, "-c", HOLD])
    with GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url) as cloud:
        watcher = watcher_of(cloud)
        folder, lock = watcher.path.parent, watcher.path.with_name(watcher.path.name + ".lock")
        folder.mkdir(parents=True)
        folder.chmod(0o755)  # as earlier versions left it
        lock.touch(mode=0o644)
        os.chown(lock, OTHER_UID, OTHER_UID)  # planted by the other user, who holds its lock
        holder = subprocess.Popen([*command, str(lock)], stdout=subprocess.PIPE, text=True)
        try:
            assert holder.stdout is not None and holder.stdout.readline().startswith("held")
            done: list[Any] = []
            creating = threading.Thread(target=lambda: done.append(
                launch(cloud, delete_when_idle=600)), daemon=True)
            creating.start()
            creating.join(30)  # generous: a busy machine; today it waits for the holder
            assert done, "create(delete_when_idle=...) waited on another user's lock"
            instance = done[0]
            assert watcher.path.is_file() and watcher.limits()[instance.id]["seconds"] == 600
            assert stat.S_IMODE(folder.stat().st_mode) == 0o700
            for file in folder.iterdir():
                info = file.stat()
                assert info.st_uid == os.getuid() and stat.S_IMODE(info.st_mode) == 0o600, file
            # The other user cannot even open what is in the folder now.
            again = subprocess.run([*command, str(lock)], capture_output=True, text=True,
                                   timeout=60)
            assert again.stdout.startswith("refused PermissionError"), again
        finally:
            holder.kill()
            holder.wait(10)
    assert [i.id for i in observer.instances.list()] == [instance.id]


def test_a_folder_of_another_user_is_refused_before_the_create(
        sandbox: Sandbox, own_home: Path, observer: GPUCloud) -> None:
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip("making a folder owned by another user needs root (os.chown)")
    with GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url) as cloud:
        folder = watcher_of(cloud).path.parent
        folder.mkdir(parents=True, exist_ok=True)
        os.chown(folder, OTHER_UID, OTHER_UID)
        try:
            with pytest.raises(GPUCloudError) as refused:
                launch(cloud, delete_when_idle=600)
        finally:
            os.chown(folder, os.getuid(), os.getgid())
    assert str(refused.value) == (
        f"The idle limits folder {folder} belongs to another user (uid {OTHER_UID}); remove it "
        "or set XDG_CACHE_HOME to a folder of your own, so delete_when_idle cannot be kept; "
        "nothing was launched.")
    assert observer.instances.list() == []


def test_a_limits_folder_that_cannot_be_written_refuses_the_create_before_the_post(
        sandbox: Sandbox, own_home: Path, observer: GPUCloud) -> None:
    """#34: the limit was written after the create, so an unwritable cache folder raised a bare
    OSError with the billed instance already running."""
    with GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url) as cloud:
        folder = watcher_of(cloud).path.parent
        folder.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(folder, ignore_errors=True)
        folder.write_text("")  # a file where the folder goes: no user, not even root, writes in it
        try:
            with pytest.raises(GPUCloudError) as refused:
                launch(cloud, delete_when_idle=600)
        finally:
            folder.unlink()
    assert type(refused.value).__name__ == "GPUCloudError"  # ours: one sentence, no traceback
    assert str(refused.value) == (
        f"The idle limits folder {folder} cannot be made (File exists), so delete_when_idle "
        "cannot be kept; nothing was launched.")
    assert observer.instances.list() == []


def test_a_lock_held_at_the_create_costs_no_wait_and_the_instance_stays_watched(
        kernel: GPUCloud, observer: GPUCloud) -> None:
    watcher = watcher_of(kernel)
    watcher.file.set("warm-up", 60.0)  # the folder and the lock file exist
    held = os.open(watcher.path.with_name(watcher.path.name + ".lock"), os.O_RDWR)
    try:
        fcntl.flock(held, fcntl.LOCK_EX)  # another kernel of this user, writing
        started = time.monotonic()
        instance = launch(kernel, delete_when_idle=2)
        assert time.monotonic() - started < 10  # the create itself; no lock wait after it
        assert watcher.limits()[instance.id]["seconds"] == 2  # watched, from memory
        assert instance.id not in watcher.file.limits()
    finally:
        os.close(held)
    wait_for(lambda: instance.id in watcher.file.limits(), timeout=2 * POLL_HERE + 5)
    assert wait_gone(observer, instance.id, 2 + POLL_HERE + 10)
    wait_for(lambda: instance.id in watcher.deleted, timeout=5)


@pytest.fixture
def remote_kernels(sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                   kernel_provisioner_entry_point: Path | None) -> None:
    """Kernels on instances find the cloud from the environment, as in a Jupyter server."""
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "jupyter-data"))
    monkeypatch.setenv("GPUCLOUD_API_KEY", sandbox.api_key)
    monkeypatch.setenv("GPUCLOUD_BASE_URL", sandbox.management_url)


def kernel_on(cloud: GPUCloud, name: str) -> str:
    """An active instance (no idle limit yet) and a kernelspec for it."""
    instance_id = cloud.instances.wait_until_active(launch(cloud, name).id, timeout=30).id
    return instance_id


@pytest.mark.usefixtures("remote_kernels")
def test_an_idle_remote_kernel_is_not_use(kernel: GPUCloud, observer: GPUCloud) -> None:
    """The kernel watcher's rule is the sandbox's: a kernel open on the instance, polled by its
    provisioner, does not keep it while it runs no code."""
    instance_id = kernel_on(kernel, "idle")
    with open_kernel(install_kernel(kernel, instance_id)) as idle:
        assert idle.execute_interactive("x = 1", timeout=60)["content"]["status"] == "ok"
        kernel.idle_delete.watch(instance_id, timedelta(seconds=3))
        assert wait_gone(observer, instance_id, 3 + POLL_HERE + 15)


@pytest.mark.usefixtures("remote_kernels")
def test_a_remote_kernel_executing_code_is_use(kernel: GPUCloud, observer: GPUCloud) -> None:
    watcher = watcher_of(kernel)
    instance_id = kernel_on(kernel, "busy")
    with open_kernel(install_kernel(kernel, instance_id)) as busy:
        busy.execute("import time\nend = time.time() + 15\nwhile time.time() < end: pass")
        kernel.idle_delete.watch(instance_id, timedelta(seconds=3))
        time.sleep(3 + 4 * POLL_HERE)
        assert observer.instances.get(instance_id).status == "active"
        state = watcher.states()[instance_id]
        assert state.gpu_util is not None and state.gpu_util >= THRESHOLD
        assert busy.get_shell_msg(timeout=60)["content"]["status"] == "ok"
        assert wait_gone(observer, instance_id, 3 + POLL_HERE + 15)


@pytest.mark.parametrize("bookkeeping", [False, True], ids=["the user's", "bookkeeping"])
def test_a_connection_through_a_forward_the_user_opened_is_use(
        kernel: GPUCloud, observer: GPUCloud, bookkeeping: bool) -> None:
    """The kernel watcher's rule is the sandbox's: a connection through a forward the user
    opened is use while open (and at the poll after it ended); a forward that only listens,
    or the package's own (a cluster's scheduler), is not."""
    with echo_port() as port:
        instance_id, _ = active(kernel, 1.5)
        remote, _ = kernel.instances.ssh(instance_id)
        with kernel.instances.forward(instance_id, port, bookkeeping=bookkeeping) as url:
            before = time.monotonic()
            with connected(url):
                assert remote.open_on(instance_id) == (0 if bookkeeping else 1)
                if bookkeeping:
                    assert wait_gone(observer, instance_id, 1.5 + POLL_HERE + 10)
                    return
                time.sleep(1.5 + 4 * POLL_HERE)
                assert observer.instances.get(instance_id).status == "active"
            wait_for(lambda: remote.open_on(instance_id) == 0)  # ended: counted at the next poll
            assert remote.open_on(instance_id, since=before) == 1
            assert remote.open_on(instance_id, since=time.monotonic()) == 0
            assert wait_gone(observer, instance_id, 1.5 + POLL_HERE + 10)  # listening only
