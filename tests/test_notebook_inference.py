"""Lessons 05 and 06 with a real-cloud key, where someone can answer: they ask, and use the answer.

tests/test_notebooks.py runs the lessons unattended (nbclient: no stdin), where they must not
ask. Here a kernel is driven as JupyterLab drives it, with ``allow_stdin`` on: the lessons'
connection cells must prompt for the address and the hidden secret, and connect to what was
typed. The "real cloud" is a sandbox reached through GPUCLOUD_API_KEY and GPUCLOUD_BASE_URL.
"""

from __future__ import annotations

import queue
from collections.abc import Callable, Iterator
from pathlib import Path

import nbformat
import pytest
from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.manager import start_new_kernel

from gpucloud_nb.sandbox import Sandbox

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


@pytest.fixture
def kernel(sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch) -> Iterator[BlockingKernelClient]:
    monkeypatch.setenv("GPUCLOUD_API_KEY", sandbox.api_key)
    monkeypatch.setenv("GPUCLOUD_BASE_URL", sandbox.management_url)
    for name in ("GPUCLOUD_INFERENCE_URL", "GPUCLOUD_INFERENCE_SECRET"):
        monkeypatch.delenv(name, raising=False)
    manager, client = start_new_kernel(kernel_name="python3", cwd=str(NOTEBOOKS))
    try:
        yield client
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


def execute(client: BlockingKernelClient, code: str, answer: Callable[[str], str],
            *, allow_stdin: bool) -> str:
    """Run ``code``, answering each input request with ``answer(prompt)``; return what it printed."""
    msg_id = client.execute(code, allow_stdin=allow_stdin)
    printed = ""
    while True:
        try:
            request = client.get_stdin_msg(timeout=0.05)
            client.input(answer(request["content"]["prompt"]))
        except queue.Empty:
            pass
        try:
            message = client.get_iopub_msg(timeout=0.05)
        except queue.Empty:
            continue
        if message["parent_header"].get("msg_id") != msg_id:
            continue
        content = message["content"]
        assert message["msg_type"] != "error", content.get("evalue")
        if message["msg_type"] == "stream":
            printed += content["text"]
        if message["msg_type"] == "status" and content["execution_state"] == "idle":
            return printed


def test_can_prompt_follows_the_front_end(kernel: BlockingKernelClient) -> None:
    code = "from gpucloud_nb import can_prompt; print(can_prompt())"
    assert execute(kernel, code, str, allow_stdin=True).strip() == "True"
    assert execute(kernel, code, str, allow_stdin=False).strip() == "False"


@pytest.mark.parametrize("name", ["05-chat-and-vision.ipynb", "06-transcribe-audio.ipynb"])
def test_lesson_asks_when_the_front_end_can_answer(kernel: BlockingKernelClient,
                                                   sandbox_factory: Callable[..., Sandbox],
                                                   name: str) -> None:
    model_box = sandbox_factory(inference_secret="sk-typed-secret-0123456789")
    answers = {"Address of your inference instance: ": model_box.inference_url,
               "Its secret (hidden): ": model_box.inference_secret}
    prompts: list[str] = []

    def answer(prompt: str) -> str:
        prompts.append(prompt)
        return answers[prompt]

    cells = [c.source for c in nbformat.read(NOTEBOOKS / name, as_version=4).cells
             if c.cell_type == "code"]
    upto = next(i for i, source in enumerate(cells) if "can_prompt" in source)
    printed = "".join(execute(kernel, source, answer, allow_stdin=True)
                      for source in cells[:upto + 1])
    printed += execute(kernel, "print(chat.models())", answer, allow_stdin=True)
    assert prompts == list(answers)
    assert model_box.inference_url in printed and "sandbox-" in printed
    assert "Set GPUCLOUD_INFERENCE_URL" not in printed
    assert model_box.inference_secret not in printed
