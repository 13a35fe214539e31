"""``cloud.ssh_keys``: the account's SSH-key book, and the key a create names by id."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import launch, launch_active

from gpucloud_nb import GPUCloud
from gpucloud_nb.client.key_book import machine_key_name, public_key_problem
from gpucloud_nb.client.remote import default_public_key
from gpucloud_nb.errors import GPUCloudError
from gpucloud_nb.sandbox import Sandbox

ED25519 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBmd0lVf5hW8dQ2b3xLq1vJb6yQ0H8fT2cW1m8s9zQ4d me@laptop"


@pytest.mark.parametrize("text", [ED25519, ED25519.rsplit(" ", 1)[0],
                                  "ecdsa-sha2-nistp256 AAAAE2VjZHNh== x",
                                  "sk-ssh-ed25519@openssh.com AAAAGnNr"])
def test_openssh_public_key_lines_pass(text: str) -> None:
    assert public_key_problem(text) is None


@pytest.mark.parametrize(("text", "words"), [
    ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbn\n-----END OPENSSH PRIVATE KEY-----",
     "That is a private key"),
    ("hello", "not an OpenSSH public key"),
    (ED25519 + "\n" + ED25519, "not an OpenSSH public key"),
])
def test_anything_else_is_one_sentence(text: str, words: str) -> None:
    problem = public_key_problem(text)
    assert problem is not None and words in problem and "\n" not in problem


def test_a_registered_key_is_named_after_the_machine() -> None:
    assert machine_key_name().startswith("gpucloud-nb ")


# -- creates on the real cloud name the key by id (the sandbox's key book stands in for it) ----

@pytest.fixture
def real(sandbox: Sandbox, own_home: Path) -> Iterator[GPUCloud]:
    """A client that does not know it talks to the sandbox, as on the real cloud; the only key
    it has is the pair it generates."""
    with GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url) as client:
        yield client


def test_a_create_registers_the_clients_key_once_and_names_it_by_id(real: GPUCloud) -> None:
    details = launch_active(real, "keyed")
    book = real.ssh_keys.list()
    assert [(k.name, k.is_default) for k in book] == [(machine_key_name(), True)]
    assert book[0].matches(default_public_key())
    assert details.ssh_key["_id"] == book[0].id  # the create named it by sshKeyId
    assert real.instances.run(details.id, "echo logged-in").stdout.strip() == "logged-in"
    launch(real, "again")
    assert [k.id for k in real.ssh_keys.list()] == [book[0].id]  # not added twice


def test_a_key_already_in_the_book_is_used_and_the_default_left_alone(real: GPUCloud) -> None:
    other = real.ssh_keys.add("desk", ED25519)
    mine = real.ssh_keys.add("laptop", default_public_key())
    assert not mine.is_default
    details = real.instances.wait_until_active(launch(real, "keyed").id, timeout=30)
    assert details.ssh_key["_id"] == mine.id
    assert [(k.id, k.is_default) for k in real.ssh_keys.list()] == [(other.id, True),
                                                                    (mine.id, False)]


def test_a_client_that_knows_the_sandbox_leaves_the_book_alone(cloud: GPUCloud, sandbox) -> None:
    cloud.sandbox = sandbox  # on the sandbox's own URL: its keys go to POST /sandbox/ssh-keys
    launch(cloud, "plain")
    assert cloud.ssh_keys.list() == []


def test_an_unknown_key_id_is_refused_by_the_sandbox(real: GPUCloud) -> None:
    with pytest.raises(GPUCloudError, match="is not in your SSH-key book"):
        launch(real, "ghost", ssh_key_id="nope")
