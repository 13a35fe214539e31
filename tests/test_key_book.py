"""``cloud.ssh_keys``: the account's SSH-key book, and the key a create names by id."""

from __future__ import annotations

import pytest

from gpucloud_nb.client.key_book import machine_key_name, public_key_problem

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
