"""The sandbox honours a create's cloud-init as a VM would: its SSH keys log in, its scripts run.

A container offer (``cloudInitAvailable`` false) refuses a script at create: see
``test_sandbox.py`` (``does not support cloud-init scripts``).
"""

from __future__ import annotations

import base64
import gzip
import shutil
from email.mime.multipart import MIMEMultipart
from email.mime.text import MIMEText
from pathlib import Path

import pytest
from helpers import wait_for
from test_ssh import keypair, ssh

from gpucloud_nb import GPUCloud
from gpucloud_nb.models import InstanceDetails, InstanceOffer
from gpucloud_nb.sandbox.cloud_init import read

needs_ssh = pytest.mark.skipif(shutil.which("ssh") is None, reason="needs the OpenSSH client")


def b64(data: str | bytes) -> str:
    return base64.b64encode(data.encode() if isinstance(data, str) else data).decode()


def multipart(*parts: tuple[str, str]) -> str:
    """What ``cloud-init devel make-mime`` writes: one MIME part per (subtype, text)."""
    message = MIMEMultipart()
    for subtype, text in parts:
        message.attach(MIMEText(text, subtype))
    return message.as_string()


def cloud_init_offer(cloud: GPUCloud) -> InstanceOffer:
    return next(o for o in cloud.instances.offers(deployment_type="vm", available=True,
                                                  sort="price")
                if o.cloud_init_available and o.configuration.os)


def launch_with(cloud: GPUCloud, script: str, *, ssh_key: str | None = None,
                name: str = "init") -> InstanceDetails:
    offer = cloud_init_offer(cloud)
    instance = cloud.instances.create(
        name=name, cloud_provider=offer.cloud.id, instance_id=offer.instance_id,
        region=offer.available_regions[0],
        vm={"os": offer.configuration.os[0], "base64CloudInitScript": script}, ssh_key=ssh_key)
    return cloud.instances.wait_until_active(instance.id, timeout=60)


# reading user data as cloud-init does --------------------------------------------------------

def test_a_cloud_config_gives_keys_to_the_default_user_and_to_named_users() -> None:
    data = read(b64("#cloud-config\nssh_authorized_keys:\n  - ssh-ed25519 AAAA top\n"
                    "users:\n  - default\n  - name: bob\n    ssh_authorized_keys: [ssh-ed25519 B]\n"
                    "  - name: default\n    ssh_authorized_keys: ssh-ed25519 D\n"))
    assert data.keys == {"": ("ssh-ed25519 AAAA top", "ssh-ed25519 D"), "bob": ("ssh-ed25519 B",)}
    assert data.scripts == () and data.skipped == ()


def test_multipart_mime_and_gzip_are_read_part_by_part() -> None:
    mime = multipart(("cloud-config", "#cloud-config\nssh_authorized_keys: [k1]\n"),
                     ("x-shellscript", "#!/bin/sh\necho one\n"),
                     ("plain", "#cloud-config\nusers: [{name: ann, ssh_authorized_keys: [k2]}]\n"),
                     ("x-include-url", "http://127.0.0.1/never\n"))
    for body in (mime.encode(), gzip.compress(mime.encode())):
        data = read(b64(body))
        assert data.keys == {"": ("k1",), "ann": ("k2",)}
        assert data.scripts == ("#!/bin/sh\necho one\n",)
        assert data.skipped == ("a text/x-include-url part",)


@pytest.mark.parametrize("body", [
    b"#cloud-config\nssh_authorized_keys: [unclosed\n",
    b"#include\nhttp://127.0.0.1/x\n",
    b"\x1f\x8b not really gzip",
    b"just some words",
    b"#cloud-config\n- a list, not a mapping\n",
])
def test_what_cloud_init_cannot_read_is_skipped_not_fatal(body: bytes) -> None:
    data = read(b64(body))
    assert data.keys == {} and data.scripts == () and len(data.skipped) == 1


# over SSH, as a user meets it -----------------------------------------------------------------

@needs_ssh
def test_cloud_init_keys_log_in_besides_the_create_key(cloud: GPUCloud, tmp_path: Path) -> None:
    given, extra, bob, stranger = (keypair(tmp_path, name)
                                   for name in ("given", "extra", "bob", "stranger"))
    public = {path.name: path.with_suffix(".pub").read_text().strip()
              for path in (given, extra, bob)}
    script = b64(multipart(
        ("cloud-config", f"#cloud-config\nssh_authorized_keys: ['{public['extra']}']\n"),
        ("cloud-config", "#cloud-config\nusers:\n  - default\n"
                         f"  - name: bob\n    ssh_authorized_keys: ['{public['bob']}']\n")))
    details = launch_with(cloud, script, ssh_key=public["given"])
    known = tmp_path / "known_hosts"
    for key, user in ((given, "ubuntu"), (extra, "ubuntu"), (bob, "bob")):
        result = ssh(key, details.ssh_port, "echo in", known, user=user)
        assert (result.returncode, result.stdout) == (0, "in\n"), (key.name, result.stderr)
    for key, user in ((bob, "ubuntu"), (extra, "bob"), (stranger, "ubuntu")):
        refused = ssh(key, details.ssh_port, "true", known, user=user)
        assert refused.returncode == 255 and "Permission denied" in refused.stderr, key.name


@needs_ssh
def test_a_shell_script_part_runs_once_at_first_boot(cloud: GPUCloud, tmp_path: Path) -> None:
    key = keypair(tmp_path, "id")
    script = b64(multipart(("x-shellscript", "#!/bin/sh\necho booted >> booted.txt\n"
                                             "echo from-the-script\n")))
    details = launch_with(cloud, script, ssh_key=key.with_suffix(".pub").read_text())
    known = tmp_path / "known_hosts"

    def output() -> str:
        return ssh(key, details.ssh_port, "cat booted.txt cloud-init-output.log", known).stdout

    wait_for(lambda: "from-the-script" in output(), timeout=60)
    assert output() == "booted\nfrom-the-script\n"


@needs_ssh
def test_a_body_cloud_init_cannot_read_boots_anyway(cloud: GPUCloud, tmp_path: Path) -> None:
    key = keypair(tmp_path, "id")
    details = launch_with(cloud, b64("not cloud-init at all"),
                          ssh_key=key.with_suffix(".pub").read_text())
    assert details.status == "active"
    assert ssh(key, details.ssh_port, "echo up", tmp_path / "kh").stdout == "up\n"
