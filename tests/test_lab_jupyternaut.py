"""The ``gpucloud`` LiteLLM provider of the Jupyter server (``gpucloud_nb.lab.jupyternaut``),
which lets Jupyternaut chat with an endpoint, against a sandbox endpoint over real HTTP: the
calls Jupyternaut makes (``litellm.acompletion`` with ``stream=True``) and, where
``jupyter_ai_jupyternaut`` is installed (not by ``[ai]``), Jupyternaut's own model and agent."""

from __future__ import annotations

import asyncio
import importlib.util
import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from gpucloud_nb import AsyncGPUCloud, GPUCloud
from gpucloud_nb.lab import jupyternaut
from gpucloud_nb.sandbox import Sandbox

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # LiteLLM stays off GitHub

pytestmark = pytest.mark.skipif(importlib.util.find_spec("litellm") is None,
                                reason="LiteLLM (the [ai] extra) is not installed")
MODEL = "sandbox-vision-1"
QUESTION = [{"role": "user", "content": "What is 2+2?"}]


@pytest.fixture
def box(sandbox_factory: Callable[..., Sandbox]) -> Sandbox:
    return sandbox_factory(launch_seconds=0.3, cold_start_seconds=0.5)


@pytest.fixture
def endpoint(box: Sandbox) -> Iterator[GPUCloud]:
    """An active endpoint ``chat``, and the provider registered as the server extension does."""
    import litellm

    with GPUCloud(api_key=box.api_key, base_url=box.management_url) as cloud:
        cloud.inference_instances.create(name="chat", model=MODEL, min=1)
        cloud.inference_instances.wait_until_active("chat", poll_interval=0.05)
        before = list(litellm.custom_provider_map)
        jupyternaut.register(lambda: AsyncGPUCloud(api_key=box.api_key,
                                                   base_url=box.management_url))
        yield cloud
        litellm.custom_provider_map = before


def test_litellm_streams_an_endpoints_reply_as_jupyternaut_asks_with_no_secret_given(
        endpoint: GPUCloud, box: Sandbox) -> None:
    import litellm

    async def ask() -> tuple[list[str], str]:
        stream = await litellm.acompletion(model="gpucloud/chat", messages=QUESTION, stream=True)
        pieces = [chunk.choices[0].delta.content or "" async for chunk in stream]
        whole = await litellm.acompletion(model="gpucloud/chat", messages=QUESTION)
        return pieces, whole.choices[0].message.content

    pieces, whole = asyncio.run(asyncio.wait_for(ask(), 120))
    expected = endpoint.inference_instances.chat_client("chat").chat(QUESTION).text
    assert "2 + 2" in expected and len([p for p in pieces if p]) > 1  # in pieces, as they came
    assert "".join(pieces) == expected and whole == expected
    assert [i["provider"] for i in litellm.custom_provider_map].count("gpucloud") == 1


def test_a_missing_or_stopped_endpoint_is_one_sentence_without_the_key(
        endpoint: GPUCloud, box: Sandbox) -> None:
    import litellm

    async def ask(model: str) -> str:
        with pytest.raises(Exception) as failed:
            stream = await litellm.acompletion(model=model, messages=QUESTION, stream=True,
                                               max_retries=0)
            [chunk async for chunk in stream]
        return str(failed.value)

    litellm.suppress_debug_info = True
    missing = asyncio.run(ask("gpucloud/nope"))
    assert "Inference instance nope not found: none has that id or name." in missing
    endpoint.inference_instances.stop("chat")
    stopped = asyncio.run(ask("gpucloud/chat"))
    assert "Inference instance chat is stopped; start it to send requests." in stopped
    assert box.api_key not in missing + stopped


@pytest.mark.skipif(not jupyternaut.installed(),
                    reason="jupyter_ai_jupyternaut is not installed (the [ai] extra leaves it out)")
def test_jupyternauts_own_model_and_agent_chat_with_the_endpoint(endpoint: GPUCloud) -> None:
    """What Jupyternaut does with each message (``get_agent``): its ``ChatLiteLLM`` with
    ``streaming=True`` in a LangGraph agent, the model id ``gpucloud/chat``, no key given."""
    from jupyter_ai_jupyternaut.jupyternaut.chat_models import ChatLiteLLM
    from langchain.agents import create_agent

    async def chat() -> str:
        agent = create_agent(ChatLiteLLM(model="gpucloud/chat", streaming=True),
                             system_prompt="You are Jupyternaut.", tools=[])
        pieces: list[Any] = []
        async for event in agent.astream_events(
                {"messages": [{"role": "user", "content": "What is 3+3?"}]}, version="v2"):
            if event["event"] == "on_chat_model_stream":
                pieces.append(event["data"]["chunk"].content)
        return "".join(pieces)

    reply = asyncio.run(asyncio.wait_for(chat(), 120))
    assert "3 + 3 = 6." in reply
