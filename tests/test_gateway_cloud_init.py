"""The gateway's own SSH key, added through cloud-init to the creates it watches for idle use.

Over real HTTP: the gateway in front of a sandbox that plays the real cloud (its spec paths and
key only); logins with the system's OpenSSH client, as in ``test_ssh.py``.
"""

from __future__ import annotations

import gzip
import shutil
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpucloud_nb import GPUCloud
from gpucloud_nb.gateway import Gateway
from gpucloud_nb.gateway.cloud_init import with_gateway_key
from gpucloud_nb.gateway.ssh_key import KEY_FILE, gateway_key, public_line
from gpucloud_nb.sandbox import Sandbox
from gpucloud_nb.sandbox.cloud_init import read
from tests.helpers import (
    ADA,
    UPSTREAM_KEY,
    as_key,
    create_body,
    wait_for,
)
from tests.test_sandbox_cloud_init import b64, multipart
from tests.test_ssh import keypair, ssh

needs_ssh = pytest.mark.skipif(shutil.which("ssh") is None, reason="needs the OpenSSH client")
GATEWAY_PUBLIC = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGatewayGatewayGatewayGatewayGatewayGate gw"


def cloud_init_offer(upstream: Sandbox) -> Any:
    with GPUCloud(api_key=UPSTREAM_KEY, base_url=upstream.management_url) as real:
        return next(o for o in real.instances.offers(deployment_type="vm", available=True,
                                                     sort="price")
                    if o.cloud_init_available and o.configuration.os)


def active(client: httpx.Client, id: str) -> dict[str, Any]:
    details: dict[str, Any] = {}

    def ready() -> bool:
        details.update(client.get(f"/gpu-cloud/instances/{id}").json())
        return details.get("status") == "active"

    wait_for(ready, timeout=60)
    return details


# the merge: the user's cloud-init unchanged, the gateway's key appended ------------------------

@pytest.mark.parametrize("user", [
    b"#!/bin/sh\necho hello > hello.txt\n",
    b"#cloud-config\nssh_authorized_keys: [ssh-ed25519 AAAA user]\n",
    gzip.compress(b"#cloud-config\nusers: [default, {name: ann, ssh_authorized_keys: [k-ann]}]\n",
                  mtime=0),
    multipart(("cloud-config", "#cloud-config\nssh_authorized_keys: [ssh-ed25519 AAAA user]\n"),
              ("x-shellscript", "#!/bin/sh\necho two\n")).encode(),
    "#!/bin/sh\necho 'non-ASCII: é ü'\n".encode(),
], ids=["script", "cloud-config", "gzip", "multipart", "utf-8"])
def test_the_users_parts_are_kept_as_they_were_and_the_key_is_added(user: bytes) -> None:
    alone, merged = read(b64(user)), read(with_gateway_key(b64(user), GATEWAY_PUBLIC))
    assert merged.scripts == alone.scripts
    assert merged.keys[""] == (*alone.keys.get("", ()), GATEWAY_PUBLIC)
    assert {k: v for k, v in merged.keys.items() if k} == {k: v for k, v in alone.keys.items() if k}
    assert merged.skipped == ()


def test_without_a_users_script_only_the_key_is_sent() -> None:
    assert read(with_gateway_key(None, GATEWAY_PUBLIC)).keys == {"": (GATEWAY_PUBLIC,)}


def test_the_key_is_made_once_private_and_read_again(tmp_path: Path) -> None:
    first = gateway_key(tmp_path)
    path = tmp_path / "ssh" / KEY_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    text = path.read_bytes()
    assert public_line(gateway_key(tmp_path)) == public_line(first)
    assert path.read_bytes() == text


# over HTTP and SSH ----------------------------------------------------------------------------

@needs_ssh
def test_a_create_watched_for_idle_carries_the_key_and_the_users_cloud_init_still_runs(
        upstream: Sandbox, gateway_factory: Callable[..., Gateway], tmp_path: Path) -> None:
    home = tmp_path / "gateway"
    home.mkdir(mode=0o700)
    gateway = gateway_factory(home=home)
    user = keypair(tmp_path, "user")
    script = b64(multipart(
        ("cloud-config", "#cloud-config\nssh_authorized_keys: "
                         f"['{user.with_suffix('.pub').read_text().strip()}']\n"),
        ("x-shellscript", "#!/bin/sh\necho ran > ran.txt\n")))
    offer = cloud_init_offer(upstream)
    with as_key(gateway, ADA) as ada:
        made = {}
        for name, extra in (("watched", {"deleteWhenIdle": 3600}), ("plain", {})):
            body = create_body(offer, name)
            body["vm"]["base64CloudInitScript"] = script
            answer = ada.post("/gpu-cloud/instances", json={**body, **extra})
            assert answer.status_code == 201, answer.text
            made[name] = active(ada, answer.json()["_id"])
    key = home / "ssh" / KEY_FILE
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    known = tmp_path / "known_hosts"
    for name in ("watched", "plain"):  # the user's cloud-config and script, unchanged
        port = made[name]["sshPort"]
        wait_for(lambda port=port: ssh(user, port, "cat ran.txt", known).stdout == "ran\n",
                 timeout=60)
    looked = ssh(key, made["watched"]["sshPort"],
                 "nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits", known)
    assert looked.returncode == 0 and looked.stdout.strip().replace(".", "").isdigit()
    refused = ssh(key, made["plain"]["sshPort"], "true", known)  # no key on VMs it need not watch
    assert refused.returncode == 255 and "Permission denied" in refused.stderr
