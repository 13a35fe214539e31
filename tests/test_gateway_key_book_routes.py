"""The SSH-key book through a gateway over real HTTP, in front of a sandbox as the real cloud: a
personal gateway passes it on (and a create names the key by id); a class gateway has none."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from helpers import launch, launch_active

from gpucloud_nb.client.key_book import machine_key_name
from gpucloud_nb.client.remote import default_public_key
from gpucloud_nb.errors import NotFoundError
from gpucloud_nb.gateway import Gateway
from tests.helpers import ADA, UPSTREAM_KEY, as_key, direct
from tests.helpers import gateway_cloud as cloud

ED25519 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBmd0lVf5hW8dQ2b3xLq1vJb6yQ0H8fT2cW1m8s9zQ4d me@laptop"


def test_a_personal_gateway_passes_the_book_on_and_a_create_names_the_key_by_id(
        upstream, gateway_factory: Callable[..., Gateway], own_home: Path) -> None:
    gateway = gateway_factory(f"{ADA} - Ada\n", personal=True)
    with cloud(gateway, ADA) as me, direct(upstream) as real:
        desk = me.ssh_keys.add("desk", ED25519)
        assert [(k["_id"], k["name"]) for k in real.get("/gpu-cloud/ssh-keys").json()] == [
            (desk.id, "desk")]  # it is the upstream account's book
        details = launch_active(me, "keyed")
        book = me.ssh_keys.list()
        mine = next(k for k in book if k.name == machine_key_name())
        assert mine.matches(default_public_key())
        assert details.ssh_key["_id"] == mine.id  # named by sshKeyId, through the gateway
        assert me.instances.run(details.id, "echo logged-in").stdout.strip() == "logged-in"
        assert me.ssh_keys.make_default("desk").is_default
        me.ssh_keys.delete("desk")
        assert [k["_id"] for k in real.get("/gpu-cloud/ssh-keys").json()] == [mine.id]
        with as_key(gateway, ADA) as raw:
            answer = raw.get("/gpu-cloud/ssh-keys")
        assert UPSTREAM_KEY not in answer.text


def test_a_class_gateway_has_no_book_and_a_create_sends_the_key_text(
        upstream, gateway_factory: Callable[..., Gateway], own_home: Path) -> None:
    gateway = gateway_factory()
    with cloud(gateway, ADA) as ada, direct(upstream) as real:
        with pytest.raises(NotFoundError):
            ada.ssh_keys.list()
        details = launch_active(ada, "texted")
        assert ada.instances.run(details.id, "echo logged-in").stdout.strip() == "logged-in"
        launch(ada, "again")
        assert real.get("/gpu-cloud/ssh-keys").json() == []  # the shared book is left alone
