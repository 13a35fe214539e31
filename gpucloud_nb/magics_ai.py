"""``%gpucloud ai-alias NAME ENDPOINT``: jupyter-ai's ``%%ai NAME`` talks to an inference instance
of this cloud. Its grammar is added to ``magics_parse`` by :func:`add_parser`; ``magics`` calls
:func:`run`.

    %pip install "gpucloud-nb[ai]"        # jupyter-ai-magic-commands and jupyter-ai-litellm
    %gpucloud ai-alias mine chat          # chat: an endpoint's name or _id
    %%ai mine
    Name three rivers.

jupyter-ai 3's ``%%ai`` (package ``jupyter-ai-magic-commands``) calls ``litellm.completion`` with
an alias's ``target``, ``api_base`` and an API key read from an environment variable; it has no
way to add a header, and this cloud wants the endpoint's secret in ``x-api-key``. Chosen: the
alias's target is ``gpucloud/NAME``, a LiteLLM custom provider (``litellm.custom_provider_map``)
whose handler sends the chat through this package's
:class:`~gpucloud_nb.client.inference_instances.EndpointClient` (the endpoint's address, the
secret in ``x-api-key``, a cold start waited for, errors in one sentence with secrets masked).
The secret stays in the kernel's memory: not in the alias (``%ai list all`` shows the target and
the address), not in an environment variable, a ``.env`` file or the notebook. LiteLLM's global
``litellm.headers`` was not used: it would send the secret to every other model the kernel calls.
The command sets ``LITELLM_LOCAL_MODEL_COST_MAP`` (unless set) so that LiteLLM reads its bundled
price list instead of fetching it from GitHub at import, and ``litellm.suppress_debug_info``, so
that a failed call prints one sentence without LiteLLM's help banner.

Streaming: the provider streams when LiteLLM is asked to (``litellm.completion(model=
"gpucloud/NAME", messages=..., stream=True)`` yields the endpoint's chunks as they come), but
``%%ai`` never asks: jupyter-ai-magic-commands 0.0.4 (the newest) builds
``completion_args = {"model": model_id, "messages": messages, "stream": False}`` in
``AiMagics.run_ai_cell`` (``jupyter_ai_magic_commands/magics.py``, line 379) and shows the reply
once it is whole; it has no option to stream.

Also chosen: the magic loads ``jupyter_ai_magic_commands`` when it is not loaded yet (as
``%load_ext jupyter_ai_magic_commands`` does, without its notice that no ``.env`` file holds
provider keys, which these aliases do not need); a stopped or failed endpoint is refused in one
sentence rather than aliased. Jupyternaut (the chat panel) runs in the Jupyter server, not in
the kernel, so an alias made here does not reach it; the server extension gives it its own
provider (:mod:`gpucloud_nb.lab.jupyternaut`).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import os
import warnings
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from gpucloud_nb._secrets import mask_url
from gpucloud_nb.errors import GPUCloudError
from gpucloud_nb.inference_records import FAILED_STATUSES

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

    from gpucloud_nb.client.inference_instances import EndpointClient
    from gpucloud_nb.client.management import GPUCloud

__all__ = ["COMMANDS", "PROVIDER", "SYNOPSIS", "add_parser", "run"]

COMMANDS = ("ai-alias",)
#: The LiteLLM provider of the aliases: ``%%ai NAME`` calls the model ``gpucloud/NAME``.
PROVIDER = "gpucloud"
SYNOPSIS = """\
  %gpucloud ai-alias NAME ENDPOINT           (jupyter-ai: %%ai NAME chats with ENDPOINT)"""
NOT_INSTALLED = ("jupyter-ai's %%ai magic is not installed in this kernel's environment; "
                 "run %pip install \"gpucloud-nb[ai]\" and then this command again.")

# alias name -> the endpoint's chat client (which holds the secret); kernel memory only
_clients: dict[str, EndpointClient] = {}


def add_parser(commands: Any, sub: Callable[..., Any], parser_class: type) -> None:
    """Add ``ai-alias`` to ``commands`` (``sub`` makes one parser)."""
    del parser_class  # no subcommands
    p = sub(commands, "ai-alias", "Let jupyter-ai's %%ai NAME chat with an inference instance "
            "of this cloud (its secret stays in the kernel).", "%gpucloud ai-alias mine chat")
    p.add_argument("name", metavar="NAME", help="the alias, as in %%%%ai NAME")
    p.add_argument("endpoint", metavar="ENDPOINT", help="the endpoint's name or _id")
    p.set_defaults(handler="ai_alias")


def installed() -> bool:
    """Whether jupyter-ai's magics (``jupyter_ai_magic_commands``) and LiteLLM can be imported."""
    return all(importlib.util.find_spec(name) is not None
               for name in ("jupyter_ai_magic_commands", "litellm"))


def run(cloud: GPUCloud, args: argparse.Namespace, shell: InteractiveShell | None, *,
        say: Callable[[str], None], stop: Callable[[str], Exception]) -> None:
    """Carry out ``%gpucloud ai-alias NAME ENDPOINT``."""
    if not installed():
        raise stop(NOT_INSTALLED)
    if shell is None:
        raise stop("%gpucloud ai-alias works in an IPython kernel, where %%ai runs.")
    # LiteLLM fetches its price list from GitHub when imported unless told to use its own copy.
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    name = args.name
    if not name or "/" in name or any(c.isspace() for c in name):
        raise stop(f"The alias {name!r} must be one word without '/'; for example "
                   "%gpucloud ai-alias mine chat.")
    with warnings.catch_warnings():  # jupyter-ai-litellm 0.1.0 warns that it lacks _version.py
        warnings.simplefilter("ignore", UserWarning)
        from jupyter_ai_litellm.model_list import CHAT_MODELS
        from jupyter_ai_magic_commands.magics import AI_COMMANDS

    if name in AI_COMMANDS or name in CHAT_MODELS:
        raise stop(f"The alias {name!r} is taken by jupyter-ai (a command or a model id); "
                   "choose another name.")
    details = cloud.inference_instances.get(args.endpoint)
    label = details.name or details.id
    status = details.status.upper()
    if status == "DISABLED":
        raise stop(f"Endpoint {label} is stopped; start it with %gpucloud endpoints start "
                   f"{label}, then run this again.")
    if status in FAILED_STATUSES:
        raise stop(f"Endpoint {label} is {details.status} and cannot chat; "
                   "%gpucloud endpoints shows your endpoints.")
    ai = _ai_magics(shell)
    client = cloud.inference_instances.chat_client(details.id)
    _register_provider()
    old = _clients.pop(name, None)
    if old is not None:
        old.close()
    _clients[name] = client
    ai.aliases[name] = {"target": f"{PROVIDER}/{name}", "api_base": mask_url(details.address or ""),
                        "api_key_name": None}
    say(f"%%ai {name} now chats with endpoint {label} ({details.status}); its secret stays "
        "in this kernel.")


def _ai_magics(shell: InteractiveShell) -> Any:
    """The shell's jupyter-ai ``AiMagics``, loading its extension if it is not loaded."""
    found = shell.magics_manager.registry.get("AiMagics")
    if found is None and shell.extension_manager is not None:
        # It says that no .env file holds provider keys: true, and needless for these aliases.
        with contextlib.redirect_stderr(io.StringIO()):
            shell.extension_manager.load_extension("jupyter_ai_magic_commands")
        _keep_our_errors_short(shell)
        found = shell.magics_manager.registry.get("AiMagics")
    if found is None:
        raise RuntimeError("jupyter_ai_magic_commands did not register its AiMagics")
    return found


def _keep_our_errors_short(shell: InteractiveShell) -> None:
    """jupyter-ai's magics take every exception (to keep it for ``%ai fix``) and print its
    traceback; ours stay one sentence (:func:`gpucloud_nb._notebook.install_error_display`), the
    others go on to jupyter-ai's handler."""
    from jupyter_ai_magic_commands.exception import store_exception

    from gpucloud_nb._notebook import _show_error

    def handler(shell: Any, etype: type[BaseException], value: BaseException, tb: Any,
                tb_offset: int | None = None) -> Any:
        if isinstance(value, GPUCloudError):
            return _show_error(shell, etype, value, tb, tb_offset)
        return store_exception(shell, etype, value, tb, tb_offset)

    shell.set_custom_exc((BaseException,), handler)


def _register_provider() -> None:
    """Add the ``gpucloud`` provider to ``litellm.custom_provider_map`` once."""
    import litellm

    litellm.suppress_debug_info = True  # a failed call is one sentence, not a help banner
    if any(item["provider"] == PROVIDER for item in litellm.custom_provider_map):
        return
    litellm.custom_provider_map = [*litellm.custom_provider_map,
                                   {"provider": PROVIDER, "custom_handler": _handler()}]


def _handler() -> Any:
    """A ``litellm.CustomLLM`` that answers ``gpucloud/NAME`` through the alias's client, whole
    (``completion``) or streamed (``streaming``, for ``litellm.completion(..., stream=True)``)."""
    import litellm
    from litellm.llms.custom_llm import CustomLLMError
    from litellm.types.utils import GenericStreamingChunk

    def client_of(model: str) -> EndpointClient:
        alias = model.split("/", 1)[-1]
        client = _clients.get(alias)
        if client is None:
            raise CustomLLMError(
                status_code=404, message=f"No endpoint is aliased as {alias}; run "
                f"%gpucloud ai-alias {alias} ENDPOINT in this kernel.")
        return client

    class EndpointLLM(litellm.CustomLLM):
        def streaming(self, model: str, messages: list[Any], *_: Any,
                      **__: Any) -> Iterator[GenericStreamingChunk]:
            with client_of(model).chat(messages, stream=True) as stream:
                finish = ""
                for chunk in stream:
                    finish = chunk.finish_reason or finish
                    if chunk.delta:
                        yield GenericStreamingChunk(
                            text=chunk.delta, is_finished=False, finish_reason="", usage=None,
                            index=chunk.index, tool_use=None)
            yield GenericStreamingChunk(text="", is_finished=True, finish_reason=finish or "stop",
                                        usage=None, index=0, tool_use=None)

        def completion(self, model: str, messages: list[Any], *_: Any,
                       **__: Any) -> litellm.ModelResponse:
            reply = client_of(model).chat(messages)
            return litellm.ModelResponse(
                id=reply.id, model=reply.model, created=reply.created,
                choices=[{"index": 0, "finish_reason": reply.finish_reason or "stop",
                          "message": {"role": "assistant", "content": reply.text}}])

    return EndpointLLM()
