"""``%gpucloud ai-alias`` and jupyter-ai's ``%%ai`` in IPython's shell, against an endpoint of a
sandbox over real HTTP; the transcript is checked for the key at teardown (tests/test_magics.py).
Skipped only where the ``[ai]`` extra is not installed (``.[test]`` installs it)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from helpers import wait_for
from IPython.core.interactiveshell import InteractiveShell

from gpucloud_nb import GPUCloud, magics, magics_ai
from gpucloud_nb.gateway import Gateway
from gpucloud_nb.sandbox import Sandbox
from tests.helpers import ADA, UPSTREAM_KEY, gateway_cloud
from tests.test_magics import (  # noqa: F401 (fixtures)
    API_KEY,
    Magic,
    _one_sentence,
    cloud,
    magic,
    sandbox_box,
    shell,
)

# LiteLLM would fetch its price list from GitHub at import; this suite stays on loopback.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

pytestmark = pytest.mark.skipif(not magics_ai.installed(),
                                reason="the [ai] extra (jupyter-ai-magic-commands) is not installed")


@pytest.fixture
def upstream(sandbox_factory: Callable[..., Sandbox]) -> Sandbox:
    """The sandbox as the real cloud behind a gateway, its endpoints quick to deploy and wake."""
    return sandbox_factory(api_key=UPSTREAM_KEY, launch_seconds=0.3, cold_start_seconds=0.5)


@pytest.fixture(autouse=True)
def _forget_aliases(shell: InteractiveShell) -> Iterator[None]:  # noqa: F811 (fixture)
    handled = shell.custom_exceptions, shell.CustomTB
    yield
    for client in magics_ai._clients.values():
        client.close()
    magics_ai._clients.clear()
    if "jupyter_ai_magic_commands" in shell.extension_manager.loaded:
        # it replaced the shell's exception handler; give it back to the other modules' tests
        shell.extension_manager.unload_extension("jupyter_ai_magic_commands")
    shell.custom_exceptions, shell.CustomTB = handled  # (its unload keeps BaseException's)


def _ai_cell(runner: Magic, alias: str, prompt: str) -> tuple[Any, str]:
    """Run ``%%ai alias`` as a notebook cell; its value and everything printed are recorded."""
    result = runner.shell.run_cell(f"%%ai {alias}\n{prompt}")
    captured = runner.capsys.readouterr()
    shown = getattr(result.result, "data", result.result)
    runner.transcript += [captured.out, captured.err, repr(result.result), str(shown)]
    return shown, captured.out + captured.err


def test_ai_cell_chats_with_the_endpoint_and_the_secret_stays_in_the_kernel(
        magic: Magic, cloud: GPUCloud) -> None:  # noqa: F811 (fixtures)
    cloud.inference_instances.create(name="chat", model="sandbox-vision-1", min=1)
    run = magic("ai-alias mine chat")
    assert run.out.startswith("%%ai mine now chats with endpoint chat (") and run.value is None
    assert run.err == ""  # not jupyter-ai's notice that no .env file holds provider keys
    # The sandbox answers only with x-api-key set to the owner's key: a reply proves the header.
    reply, printed = _ai_cell(magic, "mine", "What is 2+2?")
    assert "2 + 2" in reply, printed
    assert "Error" not in printed
    # The alias as jupyter-ai keeps and lists it: the target and the address, never the key.
    ai = magic.shell.magics_manager.registry["AiMagics"]
    assert ai.aliases["mine"]["target"] == "gpucloud/mine"
    assert ai.aliases["mine"]["api_base"] == cloud.inference_instances.get("chat").address
    listed = magic.shell.run_line_magic("ai", "list all")
    magic.transcript += [repr(ai.aliases), listed.text, listed.markdown]
    assert "gpucloud/mine" in listed.text
    assert API_KEY not in repr(dict(os.environ))
    # A conversation: the second cell carries the first exchange, as jupyter-ai does.
    reply, _ = _ai_cell(magic, "mine", "And 3+3?")
    assert "3 + 3" in reply
    # jupyter-ai's magics take every exception; ours still show as one sentence.
    failed = magic.cell("from gpucloud_nb import GPUCloud\nGPUCloud(api_key='k', base_url='ftp://x')")
    assert failed.err.strip().startswith("InvalidInputError: ") and "Traceback" not in failed.err
    assert len(failed.err.strip().splitlines()) == 1


def test_a_stopped_endpoint_is_one_sentence_before_and_after_the_alias(
        magic: Magic, cloud: GPUCloud) -> None:  # noqa: F811 (fixtures)
    cloud.inference_instances.create(name="chat", model="sandbox-vision-1", min=1)
    wait_for(lambda: cloud.inference_instances.get("chat").status == "ACTIVE")
    magic("ai-alias mine chat")
    cloud.inference_instances.stop("chat")
    _, printed = _ai_cell(magic, "mine", "Hello")
    assert "Inference instance chat is stopped; start it to send requests." in printed
    assert "Traceback" not in printed and "Give Feedback" not in printed
    # jupyter-ai's own alias to the provider, with no endpoint behind it, says how to make one.
    magic.shell.run_line_magic("ai", "alias ghost gpucloud/ghost")
    _, printed = _ai_cell(magic, "ghost", "Hello")
    assert "No endpoint is aliased as ghost; run %gpucloud ai-alias ghost ENDPOINT" in printed
    assert _one_sentence(magic("ai-alias other chat")) == (
        "Endpoint chat is stopped; start it with %gpucloud endpoints start chat, then run this "
        "again.")


def test_through_a_gateway_a_scaled_to_zero_endpoint_wakes_for_the_cell(
        magic: Magic, gateway_factory: Callable[..., Gateway]) -> None:  # noqa: F811
    gateway = gateway_factory(f"{ADA} - Ada\n")
    with gateway_cloud(gateway, ADA) as ada:
        magics.use(ada)
        ada.inference_instances.create(name="talk", model="sandbox-vision-1", min=0, max=1,
                                       cooldown=0.3)
        ada.inference_instances.wait_until_active("talk", poll_interval=0.05)
        wait_for(lambda: ada.inference_instances.get("talk").ready == 0)  # scaled to zero
        assert magic("ai-alias mine talk").out.startswith("%%ai mine now chats with endpoint talk")
        ai = magic.shell.magics_manager.registry["AiMagics"]
        assert ai.aliases["mine"]["api_base"].startswith(gateway.url.rstrip("/") + "/gateway/")
        reply, printed = _ai_cell(magic, "mine", "What is 2+2?")  # a cold start, then the reply
        assert "2 + 2" in reply, printed
        magic.transcript.append(repr(ai.aliases))
        seen = "\n".join(magic.transcript)
        assert ADA not in seen and UPSTREAM_KEY not in seen


@pytest.mark.parametrize(("line", "words"), [
    ("ai-alias mine nope", "Inference instance nope not found"),
    ("ai-alias list chat", "The alias 'list' is taken by jupyter-ai"),
    ("ai-alias a/b chat", "The alias 'a/b' must be one word without '/'"),
    ("ai-alias mine", "the following arguments are required: ENDPOINT"),
])
def test_each_mistake_is_one_sentence(magic: Magic, cloud: GPUCloud, line: str,  # noqa: F811
                                      words: str) -> None:
    assert words in _one_sentence(magic(line))
    assert magics_ai._clients == {}


def test_without_jupyter_ai_the_command_says_how_to_install_it(
        magic: Magic, cloud: GPUCloud, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    # A None entry in sys.modules is how Python itself marks a module as not importable.
    monkeypatch.setitem(sys.modules, "jupyter_ai_magic_commands", None)
    assert _one_sentence(magic("ai-alias mine chat")) == magics_ai.NOT_INSTALLED


def test_the_provider_streams_the_endpoints_chunks_when_litellm_is_asked_to(
        magic: Magic, cloud: GPUCloud) -> None:  # noqa: F811 (fixtures)
    """#38: ``litellm.completion(model="gpucloud/NAME", stream=True)`` in the kernel yields the
    endpoint's reply in pieces as they come (jupyter-ai's ``%%ai`` itself asks with
    ``stream=False``: see magics_ai's docstring); the key is in none of them."""
    cloud.inference_instances.create(name="chat", model="sandbox-vision-1", min=1)
    wait_for(lambda: cloud.inference_instances.get("chat").status == "ACTIVE")
    magic("ai-alias mine chat")
    run = magic.cell(
        "import litellm\n"
        "pieces = [c.choices[0].delta.content for c in litellm.completion(\n"
        "    model='gpucloud/mine', messages=[{'role': 'user', 'content': 'What is 2+2?'}],\n"
        "    stream=True)]\n"
        "pieces")
    assert run.err == "", run.err
    pieces = magic.shell.user_ns["pieces"]
    text = "".join(p for p in pieces if p)
    assert "2 + 2" in text and len([p for p in pieces if p]) > 1, pieces  # more than one piece
    assert text == cloud.inference_instances.chat_client("chat").chat("What is 2+2?").text
    magic.transcript += [repr(pieces)]
