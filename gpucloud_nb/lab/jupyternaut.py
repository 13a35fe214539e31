"""Jupyternaut (jupyter-ai's chat panel) chats with an endpoint of this cloud, its secret kept in
the Jupyter server: the server extension adds a LiteLLM provider ``gpucloud`` to the server's
process, and a Jupyternaut model id ``gpucloud/ENDPOINT`` (an endpoint's name or ``_id``) is
answered through :class:`~gpucloud_nb.client.inference_instances.AsyncEndpointClient`.

    # Jupyternaut's settings: add a custom model whose LiteLLM id is gpucloud/chat
    >>> register(connect)  # by GPUCloudExtension, when jupyter_ai_jupyternaut is installed  # doctest: +SKIP
    >>> await litellm.acompletion(model="gpucloud/chat", messages=[...], stream=True)  # doctest: +SKIP

Jupyternaut runs in the Jupyter server, not in a kernel: it builds
``ChatLiteLLM(**params, model=model_id, streaming=True)`` for each message
(``jupyter_ai_jupyternaut/jupyternaut/jupyternaut.py``, ``get_agent``), and its settings give a
model an ``api_base`` and parameters but no header, while this cloud wants the endpoint's secret
in ``x-api-key``. Choices:

- The provider is registered only where ``jupyter_ai_jupyternaut`` is installed, in a thread (the
  first import of LiteLLM takes seconds), so Lab's start never waits for it. The ``[ai]`` extra
  does not install Jupyternaut: it brings 27 packages (LangChain, LangGraph, MCP, jupyterlab-chat),
  and its Lab extension would change every Lab this package starts.
- The secret is the key of the cloud the sidebar uses (the personal gateway's, the hub's or the
  sandbox's), read by the server extension: nothing goes in Jupyternaut's settings, its ``.env``
  secrets or a file. In a kernel, ``gpucloud/NAME`` names an alias of ``%gpucloud ai-alias``
  (:mod:`gpucloud_nb.magics_ai`); in the server, where there are no aliases, an endpoint.
- Each message connects anew (an endpoint's address can change with a restart); a stopped or
  missing endpoint is one sentence in the chat, its secret masked.
- Tools: Jupyternaut offers its tools (notebook, files, code) with each message; the endpoint's
  ``/v1/chat/completions`` gets only the messages and answers in text, so Jupyternaut chats with
  it but does not call tools through it.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import threading
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from gpucloud_nb.errors import GPUCloudError

if TYPE_CHECKING:
    from gpucloud_nb.client.management import AsyncGPUCloud

__all__ = ["PROVIDER", "installed", "register", "register_in_background"]

PROVIDER = "gpucloud"
log = logging.getLogger(__name__)


def installed() -> bool:
    """Whether Jupyternaut (``jupyter_ai_jupyternaut``) and LiteLLM can be imported here."""
    return all(importlib.util.find_spec(name) is not None
               for name in ("jupyter_ai_jupyternaut", "litellm"))


def register_in_background(connect: Callable[[], AsyncGPUCloud]) -> threading.Thread | None:
    """:func:`register` in a daemon thread where Jupyternaut is installed; ``None`` elsewhere."""
    if not installed():
        return None
    thread = threading.Thread(target=register, args=(connect,), daemon=True,
                              name="gpucloud-jupyternaut")
    thread.start()
    return thread


def register(connect: Callable[[], AsyncGPUCloud]) -> None:
    """Add (or replace) the ``gpucloud`` provider in ``litellm.custom_provider_map``;
    ``connect`` makes a client of the cloud (it may block: it runs in a thread)."""
    import os

    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no fetch from GitHub
    import litellm

    others = [item for item in litellm.custom_provider_map if item["provider"] != PROVIDER]
    litellm.custom_provider_map = [*others,
                                   {"provider": PROVIDER, "custom_handler": _handler(connect)}]


def _handler(connect: Callable[[], AsyncGPUCloud]) -> Any:
    import litellm
    from litellm.llms.custom_llm import CustomLLMError
    from litellm.types.utils import GenericStreamingChunk

    async def pieces(model: str, messages: list[Any]) -> AsyncIterator[str]:
        endpoint = model.split("/", 1)[-1]
        cloud = await asyncio.to_thread(connect)
        try:
            try:
                client = await cloud.inference_instances.chat_client(endpoint)
                async with client, await client.chat(messages, stream=True) as stream:
                    async for chunk in stream:
                        if chunk.delta:
                            yield chunk.delta
            except GPUCloudError as error:
                raise CustomLLMError(status_code=getattr(error, "status_code", None) or 502,
                                     message=cloud.scrub(error.message)) from None
        finally:
            await cloud.aclose()

    class ServerEndpointLLM(litellm.CustomLLM):
        # An async generator, as LiteLLM iterates it; its base class says a coroutine.
        async def astreaming(  # type: ignore[override]
                self, model: str, messages: list[Any], *_: Any,
                **__: Any) -> AsyncIterator[GenericStreamingChunk]:
            async for text in pieces(model, messages):
                yield GenericStreamingChunk(text=text, is_finished=False, finish_reason="",
                                            usage=None, index=0, tool_use=None)
            yield GenericStreamingChunk(text="", is_finished=True, finish_reason="stop",
                                        usage=None, index=0, tool_use=None)

        async def acompletion(self, model: str, messages: list[Any], *_: Any,
                              **__: Any) -> litellm.ModelResponse:
            text = "".join([piece async for piece in pieces(model, messages)])
            return litellm.ModelResponse(
                model=model, choices=[{"index": 0, "finish_reason": "stop",
                                       "message": {"role": "assistant", "content": text}}])

    return ServerEndpointLLM()
