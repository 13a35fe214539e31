"""The official ``openai`` SDK pointed at the sandbox's inference endpoint."""

from __future__ import annotations

import io
import wave

import pytest

openai = pytest.importorskip("openai")

PROMPT = "Please tell me about the okapi"


@pytest.fixture(scope="module")
def box():
    from gpucloud_nb.sandbox import Sandbox

    with Sandbox(stream_tokens_per_second=5000) as sandbox:
        yield sandbox


def sdk(box, **options):
    defaults = {"base_url": box.inference_url + "/v1", "api_key": "unused",
                "default_headers": {"x-api-key": box.inference_secret}, "max_retries": 0}
    return openai.OpenAI(**{**defaults, **options})


def test_sdk_lists_models_and_streams_a_chat_reply(box) -> None:
    client = sdk(box)
    ids = [model.id for model in client.models.list()]
    assert ids and ids[0] == "sandbox-vision-1"
    whole = client.chat.completions.create(model=ids[0], messages=[{"role": "user", "content": PROMPT}])
    assert "okapi" in whole.choices[0].message.content.lower()
    stream = client.chat.completions.create(
        model=ids[0], messages=[{"role": "user", "content": PROMPT}], stream=True,
        stream_options={"include_usage": True})
    deltas, usage = [], None
    for chunk in stream:
        if chunk.choices:
            deltas.append(chunk.choices[0].delta.content or "")
        if chunk.usage is not None:
            usage = chunk.usage
    assert "".join(deltas) == whole.choices[0].message.content
    assert usage is not None and usage.total_tokens == whole.usage.total_tokens


def test_sdk_with_only_the_secret_as_its_bearer_key_is_refused_with_a_hint(box) -> None:
    """The real endpoint reads x-api-key only: what works here must work there."""
    client = openai.OpenAI(base_url=box.inference_url + "/v1", api_key=box.inference_secret,
                           max_retries=0)
    with pytest.raises(openai.AuthenticationError, match="x-api-key"):
        client.models.list()


def test_sdk_sees_the_errors(box) -> None:
    with pytest.raises(openai.AuthenticationError):
        sdk(box, default_headers={"x-api-key": "wrong"}).models.list()
    with pytest.raises(openai.NotFoundError) as caught:
        sdk(box).chat.completions.create(model="gpt-99", messages=[{"role": "user", "content": "hi"}])
    assert "gpt-99" in str(caught.value)


def test_sdk_transcribes(box) -> None:
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(16000)
        out.writeframes(b"\0\0" * 8000)
    result = sdk(box).audio.transcriptions.create(model="sandbox-vision-1",
                                                  file=("silence.wav", buffer.getvalue()))
    assert isinstance(result.text, str)
