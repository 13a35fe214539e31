"""Lessons 05 and 06 with a real-cloud key: the endpoint from the environment, never a stuck prompt.

The "real cloud" is a sandbox reached through GPUCLOUD_API_KEY and GPUCLOUD_BASE_URL, so
``connect()`` treats it as the real thing; nbclient runs the lessons unattended (no stdin).
"""

from __future__ import annotations

import queue
from pathlib import Path

import nbformat
import pytest
from jupyter_client.manager import start_new_kernel
from nbclient import NotebookClient

from gpucloud_nb.sandbox import Sandbox

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
LESSONS = ["05-chat-and-vision.ipynb", "06-transcribe-audio.ipynb"]


@pytest.fixture(scope="module")
def cloud_box() -> Sandbox:
    with Sandbox(stream_tokens_per_second=5000) as sandbox:
        yield sandbox


@pytest.fixture
def real_key(cloud_box: Sandbox, monkeypatch: pytest.MonkeyPatch) -> Sandbox:
    monkeypatch.setenv("GPUCLOUD_API_KEY", cloud_box.api_key)
    monkeypatch.setenv("GPUCLOUD_BASE_URL", cloud_box.management_url)
    for name in ("GPUCLOUD_INFERENCE_URL", "GPUCLOUD_INFERENCE_SECRET"):
        monkeypatch.delenv(name, raising=False)
    return cloud_box


def run(name: str) -> tuple[str, list[dict]]:
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    NotebookClient(notebook, timeout=120, kernel_name="python3",
                   resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]
    errors = [o for o in outputs if o.get("output_type") == "error"]
    text = "".join(o.get("text", "") for o in outputs)
    text += "".join(str(o.get("data", {}).get("text/plain", "")) for o in outputs)
    return text, errors


@pytest.mark.parametrize("name", LESSONS)
def test_lesson_without_an_endpoint_says_what_to_set_and_skips(real_key: Sandbox,
                                                              name: str) -> None:
    text, errors = run(name)
    assert errors == []
    assert "StdinNotImplementedError" not in text
    assert text.count("Set GPUCLOUD_INFERENCE_URL and GPUCLOUD_INFERENCE_SECRET") == 1
    assert "Skipped: no inference endpoint" in text
    assert real_key.api_key not in text


@pytest.mark.parametrize("name", LESSONS)
def test_lesson_reads_the_endpoint_from_the_environment(
        real_key: Sandbox, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    monkeypatch.setenv("GPUCLOUD_INFERENCE_URL", real_key.inference_url)
    monkeypatch.setenv("GPUCLOUD_INFERENCE_SECRET", real_key.inference_secret)
    text, errors = run(name)
    assert errors == []
    assert "Skipped" not in text and "Set GPUCLOUD_INFERENCE_URL" not in text
    assert real_key.inference_url in text and "Refused:" in text
    assert real_key.inference_secret not in text


def test_asks_when_the_frontend_can_answer(real_key: Sandbox) -> None:
    # A frontend that allows stdin (as JupyterLab does) gets the prompts, and answers them.
    manager, kernel = start_new_kernel(kernel_name="python3")
    try:
        code = ("from gpucloud_nb import connect, notebook_inference\n"
                "chat = notebook_inference(connect())\nprint(chat.models())")
        kernel.execute(code, allow_stdin=True)
        prompts, answers = [], [real_key.inference_url, real_key.inference_secret]
        printed = ""
        while True:
            try:
                request = kernel.get_stdin_msg(timeout=0.2)
                prompts.append(request["content"]["prompt"])
                kernel.input(answers.pop(0))
            except queue.Empty:
                pass
            try:
                message = kernel.get_iopub_msg(timeout=0.2)
            except queue.Empty:
                continue
            content = message["content"]
            if message["msg_type"] == "stream":
                printed += content["text"]
            assert message["msg_type"] != "error", content
            if message["msg_type"] == "status" and content["execution_state"] == "idle" \
                    and prompts:
                break
        assert prompts == ["Address of your inference instance: ", "Its secret (hidden): "]
        assert "sandbox-vision-1" in printed
    finally:
        kernel.stop_channels()
        manager.shutdown_kernel(now=True)
