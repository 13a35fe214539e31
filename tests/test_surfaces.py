"""The sync and async clients are one surface: every public method of a sync class has an async
twin that is a coroutine function with the same parameters, and every async method a sync twin.

Methods both classes inherit from one shared base (``scrub``, ``own_client``...) are the same
function and are not compared; ``close`` is ``aclose`` in the async class, as in httpx.
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from gpucloud_nb.client.inference import AsyncInferenceClient, InferenceClient
from gpucloud_nb.client.inference_instances import AsyncInferenceInstances, InferenceInstances
from gpucloud_nb.client.instances import AsyncInstances, Instances
from gpucloud_nb.client.key_book import AsyncSSHKeyBook, SSHKeyBook
from gpucloud_nb.client.management import AsyncGPUCloud, GPUCloud
from gpucloud_nb.client.streaming import AsyncChatStream, ChatStream
from gpucloud_nb.client.volumes import AsyncVolumes, Volumes

PAIRS = [(GPUCloud, AsyncGPUCloud), (Instances, AsyncInstances), (Volumes, AsyncVolumes),
         (InferenceClient, AsyncInferenceClient), (ChatStream, AsyncChatStream),
         (InferenceInstances, AsyncInferenceInstances), (SSHKeyBook, AsyncSSHKeyBook)]
#: The sync name of each async method whose name differs.
RENAMED = {"aclose": "close"}
#: Methods with no twin on purpose, each with the reason.
ONE_SIDED = {
    (InferenceClient, "to_async"): "the bridge from the sync client to its async twin",
    (AsyncChatStream, "open"): "the async stream's constructor (a sync stream opens in __init__)",
}


def public_methods(cls: type, other: type) -> dict[str, Any]:
    """``cls``'s public methods under their sync names, less those shared with ``other``."""
    found = {}
    for name, member in inspect.getmembers(cls):
        if name.startswith("_") or isinstance(inspect.getattr_static(cls, name), property):
            continue
        if not callable(member) or getattr(other, name, None) is member:
            continue  # an attribute, or one function inherited by both
        if (cls, name) not in ONE_SIDED:
            found[RENAMED.get(name, name)] = member
    return found


def parameters(function: Any) -> list[tuple[str, Any, Any]]:
    return [(p.name, p.kind, p.default) for p in inspect.signature(function).parameters.values()]


@pytest.mark.parametrize(("sync", "async_"), PAIRS, ids=[s.__name__ for s, _ in PAIRS])
def test_every_method_has_its_twin(sync: type, async_: type) -> None:
    ours, theirs = public_methods(sync, async_), public_methods(async_, sync)
    assert sorted(set(ours) - set(theirs)) == [], f"{async_.__name__} lacks these twins"
    assert sorted(set(theirs) - set(ours)) == [], f"{sync.__name__} lacks these twins"


@pytest.mark.parametrize(("sync", "async_"), PAIRS, ids=[s.__name__ for s, _ in PAIRS])
def test_every_async_twin_is_a_coroutine_with_the_same_parameters(sync: type,
                                                                    async_: type) -> None:
    ours, theirs = public_methods(sync, async_), public_methods(async_, sync)
    for name in sorted(set(ours) & set(theirs)):
        assert not inspect.iscoroutinefunction(ours[name]), f"{sync.__name__}.{name}"
        assert inspect.iscoroutinefunction(theirs[name]), f"{async_.__name__}.{name}"
        assert parameters(ours[name]) == parameters(theirs[name]), name


def test_the_one_sided_methods_still_exist() -> None:
    """An exception that names nothing would hide a twin gone missing later."""
    for cls, name in ONE_SIDED:
        assert callable(getattr(cls, name)), f"{cls.__name__}.{name}"


def test_a_drifted_twin_is_caught() -> None:
    class Sync:
        def get(self, id: str, *, wait: float = 1.0) -> None: ...
        def forward(self, id: str) -> None: ...

    class Async:
        async def get(self, id: str, *, wait: float = 2.0) -> None: ...
        def forward(self, id: str) -> None: ...

    ours, theirs = public_methods(Sync, Async), public_methods(Async, Sync)
    assert parameters(ours["get"]) != parameters(theirs["get"])
    assert not inspect.iscoroutinefunction(theirs["forward"])
