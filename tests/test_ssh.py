"""The sandbox's per-instance SSH servers, reached with the system's OpenSSH client on 127.0.0.1."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from gpucloud_nb import GPUCloud
from gpucloud_nb.models import InstanceOffer

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


def vm_offer(cloud: GPUCloud) -> InstanceOffer:
    return next(o for o in cloud.instances.offers(available=True) if o.deployment_type == "vm")


def launch(cloud: GPUCloud, offer: InstanceOffer, name: str = "ssh-test", **extra: Any) -> Any:
    instance = cloud.instances.create(
        name=name, cloud_provider=offer.cloud.id, instance_id=offer.instance_id,
        region=offer.available_regions[0], vm={"os": offer.configuration.os[0]}, **extra)
    return cloud.instances.wait_until_active(instance.id, timeout=30)


def test_openssh_runs_nvidia_smi_with_the_create_time_key(cloud: GPUCloud, tmp_path: Path) -> None:
    key = keypair(tmp_path, "id")
    offer = vm_offer(cloud)
    details = launch(cloud, offer, ssh_key=key.with_suffix(".pub").read_text())
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
    details = launch(cloud, vm_offer(cloud), ssh_key=right.with_suffix(".pub").read_text())
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
    details = launch(cloud, vm_offer(cloud), ssh_key=key.with_suffix(".pub").read_text())
    assert ssh(key, details.ssh_port, "true", tmp_path / "known_hosts").returncode == 0
    cloud.instances.delete(details.id)
    time.sleep(0.6)  # the servers follow the state every 0.2 s
    result = ssh(key, details.ssh_port, "true", tmp_path / "known_hosts")
    assert result.returncode == 255 and "refused" in result.stderr.lower()


def test_a_volume_file_survives_into_a_second_instance(cloud: GPUCloud, tmp_path: Path) -> None:
    key = keypair(tmp_path, "id")
    public = key.with_suffix(".pub").read_text()
    offer = vm_offer(cloud)
    volume_offer = next(v for v in cloud.volumes.offers() if v.cloud_provider.id == offer.cloud.id)
    volume = cloud.volumes.create(name="data", cloud_provider=offer.cloud.id,
                                  region=offer.available_regions[0], size_in_gb=10)
    assert volume_offer
    first = launch(cloud, offer, "writer", ssh_key=public, volume_id=volume.id)
    mount = first.volumes[0][1]
    assert mount == "/mnt/data"
    written = ssh(key, first.ssh_port, "echo kept > mnt/data/note.txt", tmp_path / "kh")
    assert written.returncode == 0, written.stderr
    cloud.instances.delete(first.id)
    second = launch(cloud, offer, "reader", ssh_key=public, volume_id=volume.id)
    assert second.ssh_port != first.ssh_port or second.id != first.id
    read = ssh(key, second.ssh_port, "cat ~/mnt/data/note.txt", tmp_path / "kh")
    assert read.stdout == "kept\n"


def test_ports_are_stable_and_rebound_after_a_restart(sandbox_factory: Any, tmp_path: Path) -> None:
    key = keypair(tmp_path, "id")
    options = {"state": tmp_path / "state.db", "home": tmp_path / "home"}
    first = sandbox_factory(**options)
    cloud = GPUCloud(api_key=first.api_key, base_url=first.management_url)
    details = launch(cloud, vm_offer(cloud), ssh_key=key.with_suffix(".pub").read_text())
    assert cloud.instances.get(details.id).ssh_port == details.ssh_port
    first.stop()
    second = sandbox_factory(**options)
    again = GPUCloud(api_key=second.api_key, base_url=second.management_url)
    port = again.instances.get(details.id).ssh_port
    assert port == details.ssh_port
    assert ssh(key, port, "nvidia-smi", tmp_path / "kh").returncode == 0  # same host key too
