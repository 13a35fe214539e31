# mypy: disable-error-code="unused-coroutine"
"""A user's script, type-checked (never run) by tests/test_types.py: every public method of the
clients gives its real record type, and its async twin a coroutine of it."""

from __future__ import annotations

import contextlib
from collections.abc import Coroutine
from datetime import timedelta
from typing import Any, assert_type

import pandas as pd

from gpucloud_nb import (
    APIError,
    AsyncGPUCloud,
    AsyncInferenceClient,
    GPUCloud,
    InferenceClient,
    RemoteTimeoutError,
    connect,
)
from gpucloud_nb.client.budgets import BudgetState
from gpucloud_nb.client.idle import IdleState
from gpucloud_nb.client.inference_instances import AsyncEndpointClient, EndpointClient
from gpucloud_nb.client.inference_types import ChatCompletion, ModelInfo, Transcription
from gpucloud_nb.client.management import SandboxInfo
from gpucloud_nb.client.remote import Remote, RunResult
from gpucloud_nb.client.sandbox_handle import SandboxHandle
from gpucloud_nb.client.streaming import AsyncChatStream, ChatStream
from gpucloud_nb.client.teacher import AccountUse
from gpucloud_nb.cluster import GPUCloudCluster
from gpucloud_nb.errors import RequestInfo
from gpucloud_nb.kernel import install_kernel, install_kernel_async
from gpucloud_nb.models import (
    CreateInstance,
    Instance,
    InstanceDetails,
    InstanceOffer,
    Volume,
    VolumeOffer,
)


def sync_cloud(cloud: GPUCloud) -> None:
    assert_type(connect(), GPUCloud)
    assert_type(cloud.instances.offers(available=True), list[InstanceOffer])
    assert_type(cloud.instances.offers_frame(), pd.DataFrame)
    assert_type(cloud.instances.check_create(
        name="a", cloud_provider="p", instance_id="i", region="r"), list[str])
    assert_type(cloud.instances.create(
        name="a", cloud_provider="p", instance_id="i", region="r"), Instance)
    assert_type(cloud.instances.create(
        name="a", cloud_provider="p", instance_id="i", region="r",
        delete_when_idle=timedelta(minutes=30)), Instance)
    assert_type(cloud.idle_delete.states(), dict[str, IdleState])
    assert_type(cloud.idle_delete.cancel("x"), bool)
    assert_type(cloud.instances.create_from(CreateInstance(
        name="a", cloud_provider="p", instance_id="i", region="r")), Instance)
    assert_type(cloud.instances.list(), list[Instance])
    assert_type(cloud.instances.get("x"), InstanceDetails)
    assert_type(cloud.instances.delete("x"), None)
    assert_type(cloud.instances.wait_until_active("x"), InstanceDetails)
    assert_type(cloud.instances.spend(), pd.DataFrame)
    assert_type(cloud.instances.run("x", "nvidia-smi"), RunResult)
    assert_type(cloud.instances.run_all(["x", "y"], "hostname", on_output=print), list[RunResult])
    assert_type(GPUCloudCluster(cloud, 4, gpu_type="H100"), GPUCloudCluster)
    assert_type(GPUCloudCluster(n_workers=2, budget=5, shutdown_on_close=False), GPUCloudCluster)
    assert_type(GPUCloudCluster.from_name("trio", cloud), GPUCloudCluster)
    assert_type(cloud.instances.upload("x", "a.txt", "a.txt"), None)
    assert_type(cloud.instances.download("x", "a.txt", "a.txt"), None)
    assert_type(cloud.instances.download("x", "a.txt", "a.txt", overwrite=True), None)
    assert_type(cloud.instances.ssh_command("x"), str)
    assert_type(cloud.instances.ssh_key_in_use("x"), str | None)
    assert_type(cloud.instances.ssh("x"), tuple[Remote, InstanceDetails])
    assert_type(cloud.instances.forward("x", 8000), contextlib.AbstractContextManager[str])
    assert_type(cloud.sandbox, SandboxHandle | None)
    assert_type(cloud.close(), None)
    assert_type(install_kernel(cloud, "x", on_shutdown="delete"), str)
    assert_type(cloud.volumes.offers(), list[VolumeOffer])
    assert_type(cloud.volumes.create(name="d", cloud_provider="p", region="r", size_in_gb=50),
                Volume)
    assert_type(cloud.volumes.list(), list[Volume])
    assert_type(cloud.volumes.get("v"), Volume)
    assert_type(cloud.volumes.delete("v"), None)
    assert_type(cloud.is_sandbox, bool)
    assert_type(cloud.sandbox_info, SandboxInfo | None)
    assert_type(cloud.key_hint, str)
    assert_type(cloud.max_hourly_cost, float | None)
    assert_type(cloud.spend(), pd.DataFrame)
    assert_type(cloud.sandbox_inference(), InferenceClient)
    assert_type(cloud.budgets.set("x", 5), BudgetState)
    assert_type(cloud.budgets.states(), dict[str, BudgetState])
    assert_type(cloud.budgets.cancel("x"), bool)
    assert_type(cloud.class_view.accounts(), list[AccountUse])
    assert_type(cloud.class_view.stop_class(), list[str])
    assert_type(cloud.class_view.csv(), str)


def async_cloud(cloud: AsyncGPUCloud) -> None:
    assert_type(cloud.instances.offers(), Coroutine[Any, Any, list[InstanceOffer]])
    assert_type(cloud.instances.offers_frame(), Coroutine[Any, Any, pd.DataFrame])
    assert_type(cloud.instances.create(
        name="a", cloud_provider="p", instance_id="i", region="r"), Coroutine[Any, Any, Instance])
    assert_type(cloud.instances.create_from(CreateInstance(
        name="a", cloud_provider="p", instance_id="i", region="r")), Coroutine[Any, Any, Instance])
    assert_type(cloud.instances.list(), Coroutine[Any, Any, list[Instance]])
    assert_type(cloud.instances.get("x"), Coroutine[Any, Any, InstanceDetails])
    assert_type(cloud.instances.delete("x"), Coroutine[Any, Any, None])
    assert_type(cloud.instances.wait_until_active("x"), Coroutine[Any, Any, InstanceDetails])
    assert_type(cloud.instances.run("x", "ls"), Coroutine[Any, Any, RunResult])
    assert_type(cloud.instances.run_all(["x"], "ls"), Coroutine[Any, Any, list[RunResult]])
    assert_type(cloud.volumes.offers(), Coroutine[Any, Any, list[VolumeOffer]])
    assert_type(cloud.volumes.list(), Coroutine[Any, Any, list[Volume]])
    assert_type(cloud.volumes.get("v"), Coroutine[Any, Any, Volume])
    assert_type(cloud.volumes.delete("v"), Coroutine[Any, Any, None])
    assert_type(cloud.spend(), Coroutine[Any, Any, pd.DataFrame])
    assert_type(cloud.instances.check_create(
        name="a", cloud_provider="p", instance_id="i", region="r"), Coroutine[Any, Any, list[str]])
    assert_type(cloud.instances.spend(), Coroutine[Any, Any, pd.DataFrame])
    assert_type(cloud.instances.upload("x", "a.txt", "a.txt"), Coroutine[Any, Any, None])
    assert_type(cloud.instances.download("x", "a.txt", "a.txt"), Coroutine[Any, Any, None])
    assert_type(cloud.instances.ssh_command("x"), Coroutine[Any, Any, str])
    assert_type(cloud.instances.ssh_key_in_use("x"), Coroutine[Any, Any, str | None])
    assert_type(cloud.instances.forward("x", 8000),
                Coroutine[Any, Any, contextlib.AbstractAsyncContextManager[str]])
    assert_type(cloud.instances.ssh("x"), Coroutine[Any, Any, tuple[Remote, InstanceDetails]])
    assert_type(cloud.instances.download("x", "a.txt", "a.txt", overwrite=True),
                Coroutine[Any, Any, None])
    assert_type(install_kernel_async(cloud, "x"), Coroutine[Any, Any, str])
    assert_type(cloud.volumes.create(name="d", cloud_provider="p", region="r", size_in_gb=50),
                Coroutine[Any, Any, Volume])
    assert_type(cloud.is_sandbox, bool)
    assert_type(cloud.sandbox_info, SandboxInfo | None)
    assert_type(cloud.sandbox, SandboxHandle | None)
    assert_type(cloud.key_hint, str)
    assert_type(cloud.max_hourly_cost, float | None)
    assert_type(cloud.sandbox_inference(), Coroutine[Any, Any, AsyncInferenceClient])
    assert_type(cloud.aclose(), Coroutine[Any, Any, None])


async def async_forward(cloud: AsyncGPUCloud) -> None:
    async with await cloud.instances.forward("x", 8000) as url:
        assert_type(url, str)
        assert_type(await AsyncInferenceClient(url, "secret").models(), list[str])


def errors_tree() -> None:
    try:
        GPUCloud().instances.run("x", "ls")
    except RemoteTimeoutError as timeout:
        assert_type(timeout.message, str)
    except APIError as error:
        assert_type(error.status_code, int)
        assert_type(error.request, RequestInfo | None)
        assert_type(error.body, Any)


def inference(chat: InferenceClient, achat: AsyncInferenceClient) -> None:
    assert_type(chat.models(), list[str])
    assert_type(chat.model_records(), list[ModelInfo])
    assert_type(chat.transcribe(b"RIFF"), Transcription)
    assert_type(chat.chat("Hi"), ChatCompletion)
    assert_type(chat.chat("Hi", stream=True), ChatStream)
    assert_type(chat.to_async(), AsyncInferenceClient)
    assert_type(chat.scrub("text"), str)
    assert_type(chat.endpoint_url, str)
    assert_type(chat.secret_hint, str)
    assert_type(achat.endpoint_url, str)
    assert_type(achat.scrub("text"), str)
    assert_type(achat.aclose(), Coroutine[Any, Any, None])
    assert_type(achat.models(), Coroutine[Any, Any, list[str]])
    assert_type(achat.model_records(), Coroutine[Any, Any, list[ModelInfo]])
    assert_type(achat.transcribe(b"RIFF"), Coroutine[Any, Any, Transcription])
    assert_type(achat.chat("Hi"), Coroutine[Any, Any, ChatCompletion])
    assert_type(achat.chat("Hi", stream=True), Coroutine[Any, Any, AsyncChatStream])


def endpoints(cloud: GPUCloud, acloud: AsyncGPUCloud) -> None:
    from gpucloud_nb.models import (
        InferenceHardware,
        InferenceInstance,
        InferenceInstanceDetails,
        InferenceModel,
        InferenceRegion,
        SSHKey,
    )

    endpoints = cloud.inference_instances
    assert_type(endpoints.models(), list[InferenceModel])
    assert_type(endpoints.hardwares(), list[InferenceHardware])
    assert_type(endpoints.regions(), list[InferenceRegion])
    assert_type(endpoints.models_frame(), pd.DataFrame)
    assert_type(endpoints.hardwares_frame(), pd.DataFrame)
    assert_type(endpoints.create(name="c", model="m", min=0, max=2, cooldown=timedelta(minutes=5),
                                 triggers={"http": 4}, envs={"A": "1"}), InferenceInstance)
    assert_type(endpoints.list(), list[InferenceInstance])
    assert_type(endpoints.get("c"), InferenceInstanceDetails)
    assert_type(endpoints.update("c", max=4), InferenceInstanceDetails)
    assert_type(endpoints.start("c"), InferenceInstanceDetails)
    assert_type(endpoints.stop("c"), InferenceInstanceDetails)
    assert_type(endpoints.delete("c"), None)
    assert_type(endpoints.wait_until_active("c", on_progress=print), InferenceInstanceDetails)
    assert_type(endpoints.chat_client("c"), EndpointClient)  # an InferenceClient that wakes
    assert_type(cloud.ssh_keys.list(), list[SSHKey])
    assert_type(cloud.ssh_keys.add("laptop", path="~/.ssh/id_ed25519.pub"), SSHKey)
    assert_type(cloud.ssh_keys.make_default("laptop"), SSHKey)
    assert_type(cloud.ssh_keys.delete("laptop"), None)
    assert_type(acloud.inference_instances.get("c"),
                Coroutine[Any, Any, InferenceInstanceDetails])
    assert_type(acloud.inference_instances.chat_client("c"),
                Coroutine[Any, Any, AsyncEndpointClient])
    assert_type(acloud.ssh_keys.list(), Coroutine[Any, Any, list[SSHKey]])
