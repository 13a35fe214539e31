"""The sandbox's per-instance SSH servers, reached with the system's OpenSSH client on 127.0.0.1."""

from __future__ import annotations

import asyncio
import logging
import shutil
import subprocess
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import launch, launch_active, vm_offer, wait_for

from gpucloud_nb import GPUCloud
from gpucloud_nb.models import InstanceOffer
from gpucloud_nb.sandbox.ssh import SHARED_SHELL_REFUSAL, SHARED_SHELL_WARNING
from gpucloud_nb.sandbox.store import Store

pytestmark = pytest.mark.skipif(shutil.which("ssh") is None, reason="needs the OpenSSH client")


def keypair(directory: Path, name: str) -> Path:
    path = directory / name
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return path


def ssh(key: Path, port: int, command: str, known_hosts: Path,
        user: str = "ubuntu") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["ssh", "-i", str(key), "-p", str(port), "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes",
         "-o", f"UserKnownHostsFile={known_hosts}", "-o", "StrictHostKeyChecking=accept-new",
         "-o", "ConnectTimeout=10", "-F", "/dev/null", f"{user}@127.0.0.1", command],
        capture_output=True, text=True, timeout=60,
    )


def volume_vm_offer(cloud: GPUCloud) -> InstanceOffer:
    """The catalogue's first available vm offer: its provider sells the 10 GB volumes used here
    (the cheapest offer's provider sells 50 GB and up)."""
    return next(o for o in cloud.instances.offers(available=True) if o.deployment_type == "vm")


def test_openssh_runs_nvidia_smi_with_the_create_time_key(cloud: GPUCloud, tmp_path: Path) -> None:
    key = keypair(tmp_path, "id")
    offer = vm_offer(cloud)
    details = launch_active(cloud, "ssh-test", offer=offer,
                            ssh_key=key.with_suffix(".pub").read_text())
    assert details.ip == "127.0.0.1" and details.ssh_port > 1024
    result = ssh(key, details.ssh_port, "nvidia-smi && echo HOME=$HOME && pwd",
                 tmp_path / "known_hosts")
    assert result.returncode == 0, result.stderr
    assert offer.gpu_name in result.stdout and "NVIDIA-SMI" in result.stdout
    assert f"{offer.configuration.vram_gb * 1024:.0f}MiB" in result.stdout
    home = result.stdout.split("HOME=")[1].split()[0]
    assert home.endswith(details.id) and result.stdout.strip().endswith(home)


def test_a_wrong_key_and_a_password_are_refused(cloud: GPUCloud, tmp_path: Path) -> None:
    right, wrong = keypair(tmp_path, "right"), keypair(tmp_path, "wrong")
    details = launch_active(cloud, "ssh-test", ssh_key=right.with_suffix(".pub").read_text())
    refused = ssh(wrong, details.ssh_port, "true", tmp_path / "known_hosts")
    assert refused.returncode == 255 and "Permission denied (publickey)" in refused.stderr
    assert ssh(right, details.ssh_port, "true", tmp_path / "known_hosts").returncode == 0
    password = subprocess.run(
        ["ssh", "-p", str(details.ssh_port), "-o", "BatchMode=yes", "-o", "PubkeyAuthentication=no",
         "-o", "PreferredAuthentications=password,keyboard-interactive", "-F", "/dev/null",
         "-o", f"UserKnownHostsFile={tmp_path / 'known_hosts'}", "ubuntu@127.0.0.1", "true"],
        capture_output=True, text=True, timeout=60)
    assert password.returncode == 255 and "Permission denied (publickey)" in password.stderr


def test_a_deleted_instance_refuses_connections(cloud: GPUCloud, tmp_path: Path) -> None:
    key = keypair(tmp_path, "id")
    details = launch_active(cloud, "ssh-test", ssh_key=key.with_suffix(".pub").read_text())
    assert ssh(key, details.ssh_port, "true", tmp_path / "known_hosts").returncode == 0
    cloud.instances.delete(details.id)
    time.sleep(0.6)  # the servers follow the state every 0.2 s
    result = ssh(key, details.ssh_port, "true", tmp_path / "known_hosts")
    assert result.returncode == 255 and "refused" in result.stderr.lower()


def test_a_volume_file_survives_into_a_second_instance(cloud: GPUCloud, tmp_path: Path) -> None:
    key = keypair(tmp_path, "id")
    public = key.with_suffix(".pub").read_text()
    offer = volume_vm_offer(cloud)
    volume_offer = next(v for v in cloud.volumes.offers() if v.cloud_provider.id == offer.cloud.id)
    volume = cloud.volumes.create(name="data", cloud_provider=offer.cloud.id,
                                  region=offer.available_regions[0], size_in_gb=10)
    assert volume_offer
    first = launch_active(cloud, "writer", offer=offer, ssh_key=public, volume_id=volume.id)
    mount = first.volumes[0][1]
    assert mount == "/mnt/data"
    written = ssh(key, first.ssh_port, "echo kept > mnt/data/note.txt", tmp_path / "kh")
    assert written.returncode == 0, written.stderr
    cloud.instances.delete(first.id)
    second = launch_active(cloud, "reader", offer=offer, ssh_key=public, volume_id=volume.id)
    assert second.ssh_port != first.ssh_port or second.id != first.id
    read = ssh(key, second.ssh_port, "cat ~/mnt/data/note.txt", tmp_path / "kh")
    assert read.stdout == "kept\n"


def test_ports_are_stable_and_rebound_after_a_restart(sandbox_factory: Any, tmp_path: Path) -> None:
    key = keypair(tmp_path, "id")
    options = {"state": tmp_path / "state.db", "home": tmp_path / "home"}
    first = sandbox_factory(**options)
    cloud = GPUCloud(api_key=first.api_key, base_url=first.management_url)
    details = launch_active(cloud, "ssh-test", ssh_key=key.with_suffix(".pub").read_text())
    assert cloud.instances.get(details.id).ssh_port == details.ssh_port
    first.stop()
    second = sandbox_factory(**options)
    again = GPUCloud(api_key=second.api_key, base_url=second.management_url)
    port = again.instances.get(details.id).ssh_port
    assert port == details.ssh_port
    assert ssh(key, port, "nvidia-smi", tmp_path / "kh").returncode == 0  # same host key too


# several accounts under one OS user ----------------------------------------------------------


def asyncssh_key() -> tuple[Any, str]:
    import asyncssh

    key = asyncssh.generate_private_key("ssh-ed25519")
    return key, key.export_public_key().decode()


def over_asyncssh(port: int, key: Any, work: Callable[[Any], Awaitable[Any]]) -> Any:
    """Run ``work(connection)`` on a fresh asyncssh connection to an instance."""
    import asyncssh

    async def main() -> Any:
        async with asyncssh.connect("127.0.0.1", port, username="ubuntu", client_keys=[key],
                                    known_hosts=None, agent_path=None, config=[]) as connection:
            return await work(connection)

    return asyncio.run(main())


def test_an_instance_the_api_calls_active_is_already_listening(sandbox_factory: Any,
                                                               tmp_path: Path) -> None:
    """Its server opens before the status turns active, not at the reconciler's next tick."""
    import socket

    sandbox = sandbox_factory(launch_seconds=1.5)
    cloud = GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url)
    instance = launch(cloud, "prompt", ssh_key=keypair(tmp_path, "id").with_suffix(".pub").read_text())
    deadline = time.monotonic() + 30
    while (details := cloud.instances.get(instance.id)).status != "active":
        assert time.monotonic() < deadline
        time.sleep(0.005)  # the first answer that says active, as soon as it says so
    with socket.create_connection(("127.0.0.1", details.ssh_port), timeout=10) as connection:
        assert connection.recv(64).startswith(b"SSH-2.0-")
    cloud.close()


def test_several_accounts_refuse_every_session_and_forward_with_one_sentence(
        sandbox_factory: Any, tmp_path: Path) -> None:
    import asyncssh

    sandbox = sandbox_factory(keys=("student-b-key-0123456789",))
    cloud = GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url)
    key, public = asyncssh_key()
    details = launch_active(cloud, "ssh-test", ssh_key=public)

    async def refusals(connection: Any) -> list[str]:
        attempts = [
            lambda: connection.run("cat ../*/* ~/../../*", check=False),     # run / exec
            lambda: connection.create_process(term_type="xterm"),            # a shell
            lambda: connection.start_sftp_client(),                          # SFTP
            lambda: connection.open_connection("localhost", 8000),           # port 8000
        ]
        reasons = []
        for attempt in attempts:
            with pytest.raises(asyncssh.ChannelOpenError) as info:
                await attempt()
            reasons.append(info.value.reason)
        return reasons

    assert over_asyncssh(details.ssh_port, key, refusals) == [SHARED_SHELL_REFUSAL] * 4
    assert SHARED_SHELL_REFUSAL.count(". ") == 0 and "shared_shell=True" in SHARED_SHELL_REFUSAL
    openssh = keypair(tmp_path, "id")
    other = launch_active(cloud, "openssh",
                   ssh_key=openssh.with_suffix(".pub").read_text())
    refused = ssh(openssh, other.ssh_port, "id", tmp_path / "known_hosts")
    assert refused.returncode == 255 and SHARED_SHELL_REFUSAL in refused.stderr
    assert refused.stdout == ""


def test_the_client_says_several_accounts_refused_in_one_sentence(sandbox_factory: Any,
                                                             tmp_path: Path) -> None:
    from gpucloud_nb.client.remote import RemoteCommandError

    sandbox = sandbox_factory(keys=("student-b-key-0123456789",))
    identity = keypair(tmp_path, "id")
    cloud = GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url,
                     ssh_identity=identity)
    details = launch_active(cloud, "ssh-test", ssh_key=identity.with_suffix(".pub").read_text())
    local = tmp_path / "notes.txt"
    local.write_text("hello\n")
    attempts = [lambda: cloud.instances.run(details.id, "id"),
                lambda: cloud.instances.upload(details.id, local, "notes.txt"),
                lambda: cloud.instances.download(details.id, "notes.txt", tmp_path / "back.txt")]
    for attempt in attempts:
        with pytest.raises(RemoteCommandError) as refused:
            attempt()
        assert str(refused.value) == (
            f"Instance {details.id} refused the request: {SHARED_SHELL_REFUSAL}")
    assert not (tmp_path / "back.txt").exists()
    cloud.close()


def test_shared_shell_lets_several_accounts_use_ssh(sandbox_factory: Any,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="gpucloud_nb.sandbox.ssh"):
        sandbox = sandbox_factory(keys=("student-b-key-0123456789",), shared_shell=True)
        wait_for(lambda: SHARED_SHELL_WARNING in caplog.messages, timeout=30)
    cloud = GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url)
    key, public = asyncssh_key()
    details = launch_active(cloud, "ssh-test", ssh_key=public)

    async def use(connection: Any) -> tuple[str, bytes, bytes]:
        ran = await connection.run("echo hi > note.txt && echo $GPUCLOUD_PORT_8000", check=True)
        async with connection.start_sftp_client() as sftp, sftp.open("note.txt", "rb") as file:
            copied = await file.read()
        # Port 8000 of the instance is the host port in $GPUCLOUD_PORT_8000: serve there.
        server = await asyncio.start_server(
            lambda r, w: (w.write(b"from the model port"), w.close()), "127.0.0.1",
            int(ran.stdout.strip()))
        async with server:
            reader, writer = await connection.open_connection("localhost", 8000)
            got = await asyncio.wait_for(reader.read(100), 10)
            writer.close()
        return ran.stdout, copied, got

    stdout, copied, got = over_asyncssh(details.ssh_port, key, use)
    assert stdout.strip().isdigit() and copied == b"hi\n" and got == b"from the model port"


def test_instance_homes_are_outside_the_sandbox_home(sandbox_factory: Any, tmp_path: Path) -> None:
    home = tmp_path / "home"
    sandbox = sandbox_factory(home=home, state=tmp_path / "state.db")
    cloud = GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url)
    key, public = asyncssh_key()
    details = launch_active(cloud, "ssh-test", ssh_key=public)

    async def where(connection: Any) -> list[str]:
        result = await connection.run("pwd -P; cd ..; pwd -P; cd ..; pwd -P; cd ..; pwd -P",
                                      check=True)
        return str(result.stdout).split()

    instance_home, instances, machines, parent = (Path(p) for p in
                                                  over_asyncssh(details.ssh_port, key, where))
    assert instance_home.name == details.id
    for directory in (instance_home, instances, machines):
        assert not directory.is_relative_to(home.resolve()), directory  # cd .. never enters it
    assert machines.name == "home-machines" and parent == home.resolve().parent


def test_volumes_of_a_home_from_before_the_move_are_kept(sandbox_factory: Any,
                                                         tmp_path: Path) -> None:
    home, state = tmp_path / "home", tmp_path / "state.db"
    first = sandbox_factory(home=home, state=state)
    cloud = GPUCloud(api_key=first.api_key, base_url=first.management_url)
    key, public = asyncssh_key()
    offer = volume_vm_offer(cloud)
    volume = cloud.volumes.create(name="data", cloud_provider=offer.cloud.id,
                                  region=offer.available_regions[0], size_in_gb=10)
    writer = launch_active(cloud, "writer", offer=offer, ssh_key=public, volume_id=volume.id)
    over_asyncssh(writer.ssh_port, key, lambda c: c.run("echo kept > mnt/data/note", check=True))
    cloud.instances.delete(writer.id)
    first.stop()
    # The layout of a home written before instances moved out of it: <home>/volumes/<id>.
    shutil.move(tmp_path / "home-machines" / "volumes", home / "volumes")
    shutil.rmtree(tmp_path / "home-machines")
    second = sandbox_factory(home=home, state=state)
    again = GPUCloud(api_key=second.api_key, base_url=second.management_url)
    reader = launch_active(again, "reader", offer=offer, ssh_key=public, volume_id=volume.id)
    read = over_asyncssh(reader.ssh_port, key, lambda c: c.run("cat ~/mnt/data/note"))
    assert read.stdout == "kept\n" and not (home / "volumes").exists()


def test_a_stored_volume_path_never_mounts_outside_the_instance_home(
        sandbox_factory: Any, tmp_path: Path) -> None:
    home, state = tmp_path / "home", tmp_path / "state.db"
    first = sandbox_factory(home=home, state=state)
    cloud = GPUCloud(api_key=first.api_key, base_url=first.management_url)
    key, public = asyncssh_key()
    offer = volume_vm_offer(cloud)
    volume = cloud.volumes.create(name="data", cloud_provider=offer.cloud.id,
                                  region=offer.available_regions[0], size_in_gb=10)
    instance = launch(cloud, "old", offer=offer, ssh_key=public, volume_id=volume.id)
    first.stop()
    shutil.rmtree(tmp_path / "home-machines" / "instances", ignore_errors=True)  # not mounted yet
    # A state written before names were checked: the volume entry walks out of the home.
    store = Store(state)
    record = store.instance(volume.user, instance.id)
    assert record is not None
    escape = "/mnt/../../../../escape"
    store.update_instance_doc(instance.id, dict(record.doc, volumes=[[volume.id, escape]]))
    store.close()
    second = sandbox_factory(home=home, state=state)
    again = GPUCloud(api_key=second.api_key, base_url=second.management_url)
    details = again.instances.wait_until_active(instance.id, timeout=30)
    listed = over_asyncssh(details.ssh_port, key, lambda c: c.run("ls ~/mnt", check=False))
    assert not (tmp_path / "escape").exists() and not (tmp_path / "escape").is_symlink()
    assert listed.stdout.split() == [volume.id]  # mounted at ~/mnt/<volume id> instead
    assert sorted(p.name for p in tmp_path.iterdir()) == ["home", "home-machines", "state.db",
                                                          "state.db-shm", "state.db-wal"]


def test_a_mnt_link_out_of_the_home_is_not_followed_when_mounting(sandbox_factory: Any,
                                                                  tmp_path: Path) -> None:
    home, state, outside = tmp_path / "home", tmp_path / "state.db", tmp_path / "outside"
    outside.mkdir()
    first = sandbox_factory(home=home, state=state)
    cloud = GPUCloud(api_key=first.api_key, base_url=first.management_url)
    key, public = asyncssh_key()
    offer = volume_vm_offer(cloud)
    volume = cloud.volumes.create(name="data", cloud_provider=offer.cloud.id,
                                  region=offer.available_regions[0], size_in_gb=10)
    details = launch_active(cloud, "ssh-test", offer=offer, ssh_key=public, volume_id=volume.id)
    over_asyncssh(details.ssh_port, key,
                  lambda c: c.run(f"rm -r ~/mnt && ln -s {outside} ~/mnt", check=True))
    first.stop()
    second = sandbox_factory(home=home, state=state)  # mounts the volume again
    again = GPUCloud(api_key=second.api_key, base_url=second.management_url)
    again.instances.wait_until_active(details.id, timeout=30)
    listed = over_asyncssh(details.ssh_port, key, lambda c: c.run("echo up", check=True))
    assert listed.stdout == "up\n" and list(outside.iterdir()) == []


def test_a_forward_reaches_a_port_a_command_on_the_instance_listens_on(cloud: GPUCloud) -> None:
    import asyncssh

    key, public = asyncssh_key()
    details = launch_active(cloud, "ssh-test", ssh_key=public)
    served = ("import socket; s = socket.create_server(('127.0.0.1', 0)); "
              "print(s.getsockname()[1], flush=True); c, _ = s.accept(); c.sendall(b'hello')")

    async def use(connection: Any) -> tuple[bytes, list[str]]:
        process = await connection.create_process(f"python3 -c \"{served}\"")
        port = int(await asyncio.wait_for(process.stdout.readline(), 20))
        reader, writer = await connection.open_connection("localhost", port)
        got = await asyncio.wait_for(reader.read(100), 10)
        writer.close()
        refused = []
        with pytest.raises(asyncssh.ChannelOpenError) as info:
            await connection.open_connection("127.0.0.2", port)  # only the instance's loopback
        refused.append(type(info.value).__name__)
        process.close()
        return got, refused

    got, refused = over_asyncssh(details.ssh_port, key, use)
    assert got == b"hello" and refused == ["ChannelOpenError"]


def test_deleting_an_instance_removes_its_home_but_not_its_volume(
        sandbox_factory: Any, tmp_path: Path) -> None:
    """Spec rule 1: what is not on a volume goes with the instance (synced notebooks, a
    cluster's key.pem); the volume's files stay."""
    sandbox = sandbox_factory(home=tmp_path / "home")
    cloud = GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url)
    key, public = asyncssh_key()
    offer = volume_vm_offer(cloud)
    volume = cloud.volumes.create(name="data", cloud_provider=offer.cloud.id,
                                  region=offer.available_regions[0], size_in_gb=10)
    instance = launch_active(cloud, "gone", offer=offer, ssh_key=public, volume_id=volume.id)
    shown = over_asyncssh(instance.ssh_port, key, lambda c: c.run(
        "mkdir -p project && echo secret > project/key.pem && echo kept > mnt/data/note && pwd",
        check=True))
    home = Path(shown.stdout.strip())
    assert (home / "project" / "key.pem").is_file()
    cloud.instances.delete(instance.id)
    wait_for(lambda: not home.exists(), timeout=30)
    kept = tmp_path / "home-machines" / "volumes" / volume.id / "note"
    assert kept.read_text() == "kept\n"
    cloud.close()


def test_deleting_a_volume_removes_its_folder_and_a_restart_removes_stale_ones(
        sandbox_factory: Any, tmp_path: Path) -> None:
    """A deleted volume's data goes with it, as on the cloud: its folder is removed at the
    delete, and a folder no stored volume owns (deleted while no service ran) at the start."""
    home, state = tmp_path / "home", tmp_path / "state.db"
    sandbox = sandbox_factory(home=home, state=state)
    cloud = GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url)
    key, public = asyncssh_key()
    offer = volume_vm_offer(cloud)
    volume = cloud.volumes.create(name="data", cloud_provider=offer.cloud.id,
                                  region=offer.available_regions[0], size_in_gb=10)
    kept = cloud.volumes.create(name="kept", cloud_provider=offer.cloud.id,
                                region=offer.available_regions[0], size_in_gb=10)
    instance = launch_active(cloud, "writer", offer=offer, ssh_key=public, volume_id=volume.id)
    over_asyncssh(instance.ssh_port, key, lambda c: c.run("echo data > mnt/data/note", check=True))
    volumes = tmp_path / "home-machines" / "volumes"
    assert (volumes / volume.id / "note").read_text() == "data\n"
    cloud.instances.delete(instance.id)
    wait_for(lambda: cloud.instances.get(instance.id).status == "deleted", timeout=60)
    cloud.volumes.delete(volume.id)
    assert not (volumes / volume.id).exists()
    sandbox.stop()
    (volumes / kept.id).mkdir(parents=True, exist_ok=True)
    stale = volumes / "65a1f00dfeedfacecafe0002"  # a volume deleted while no service ran
    (stale / "data").mkdir(parents=True)
    sandbox_factory(home=home, state=state)
    wait_for(lambda: not stale.exists(), timeout=30)
    assert (volumes / kept.id).is_dir()  # a stored volume keeps its folder across a restart
    cloud.close()


def test_homes_of_instances_deleted_before_are_removed_when_the_sandbox_starts(
        sandbox_factory: Any, tmp_path: Path) -> None:
    home, state = tmp_path / "home", tmp_path / "state.db"
    first = sandbox_factory(home=home, state=state)
    cloud = GPUCloud(api_key=first.api_key, base_url=first.management_url)
    alive = launch_active(cloud, "alive").id
    instances = tmp_path / "home-machines" / "instances"
    wait_for(lambda: (instances / alive).is_dir(), timeout=30)
    first.stop()
    left = instances / "65a1f00dfeedfacecafe0001"  # a home an older sandbox left behind
    (left / "project").mkdir(parents=True)
    (left / "project" / "key.pem").write_text("secret")
    second = sandbox_factory(home=home, state=state)
    wait_for(lambda: not left.exists(), timeout=30)
    assert (instances / alive).is_dir()  # a live instance keeps its home across a restart
    second.stop()
    cloud.close()
