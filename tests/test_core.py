"""A client's core gets its ``Blocking`` reach when it is built, and hands its money rules to
whoever keeps them (a gateway, or nobody): never a thread of its own, never the sandbox."""

from __future__ import annotations

import asyncssh
import httpx
import pytest

from gpucloud_nb._secrets import Secret
from gpucloud_nb.client._core import Blocking, Core
from gpucloud_nb.client._ops import RetryPolicy, SyncDriver
from gpucloud_nb.client.autodelete import ServiceAutoDelete, UnkeptAutoDelete
from gpucloud_nb.client.budgets import ServiceBudgets, UnkeptBudgets
from gpucloud_nb.client.idle import ServiceIdleDelete, UnkeptIdleDelete
from gpucloud_nb.errors import BadRequestError
from gpucloud_nb.sandbox import Sandbox


def test_a_core_hands_its_money_rules_to_whoever_keeps_them(sandbox: Sandbox) -> None:
    sent: list[tuple[str, str]] = []

    def send(method: str, path: str, body: object) -> object:
        sent.append((method, path))
        return {}

    with httpx.Client(base_url=sandbox.management_url) as http:
        core = Core(SyncDriver(http), Secret(sandbox.api_key), RetryPolicy(), None, 60,
                    Blocking(send=send))
        kept = (core.auto_delete, core.idle_delete, core.budgets)
        assert [type(k) for k in kept] == [UnkeptAutoDelete, UnkeptIdleDelete, UnkeptBudgets]
        assert {k.where for k in kept} == {"nobody"}  # the cloud directly, until a gateway
        core.sandbox = sandbox  # the sandbox itself keeps no money rule either
        assert {k.where for k in (core.auto_delete, core.idle_delete, core.budgets)} == {"nobody"}
        public = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode()
        core.register_keys([public])  # to the sandbox itself, over real HTTP
        assert sent == []
        with pytest.raises(BadRequestError, match="Not an OpenSSH public key"):
            core.register_keys(["ssh-ed25519 AAAA test"])  # the sandbox read it and said so
        core.gateway = True
        core.use_gateway()
        assert isinstance(core.auto_delete, ServiceAutoDelete)
        assert isinstance(core.idle_delete, ServiceIdleDelete)
        assert isinstance(core.budgets, ServiceBudgets)
        assert {k.where for k in (core.auto_delete, core.idle_delete, core.budgets)} == {"gateway"}
        assert sent == []
