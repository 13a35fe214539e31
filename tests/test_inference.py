"""The inference client against the sandbox's inference endpoint, over real HTTP.

Failures a real server cannot produce on demand (a 500, an upload refusal past the client's own
checks) use ``httpx.MockTransport``; so do the refusals, where the transport fails the test if the
client sends anything at all.
"""

from __future__ import annotations

import asyncio
import http.server
import io
import os
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from PIL import Image
from samples import silent_wav

from benchmarks.bench_chat import FakeChatServer
from gpucloud_nb import AsyncInferenceClient, InferenceClient
from gpucloud_nb.client.inference import ChatChunk, ChatCompletion, ChatStream, normalize_messages
from gpucloud_nb.errors import (
    APIError,
    AuthenticationError,
    BadRequestError,
    ConnectionFailedError,
    FileTooLargeError,
    InvalidInputError,
    NotFoundError,
    RateLimitError,
    ServerError,
    UnreadableResponseError,
    UnsupportedFileTypeError,
)
from gpucloud_nb.sandbox import Sandbox

SECRET = "sk-inference-Zq81RECOGNISABLE-secret-4242"
PROMPT = "Please tell me about the okapi"
SPOKEN = "hello how are you today"


# fixtures -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def box() -> Iterator[Sandbox]:
    """A sandbox that streams fast, with a recognisable secret (the endpoint keeps no state)."""
    with Sandbox(inference_secret=SECRET, stream_tokens_per_second=5000) as sandbox:
        yield sandbox


@pytest.fixture(scope="module")
def client(box: Sandbox) -> Iterator[InferenceClient]:
    with InferenceClient(box.inference_url, box.inference_secret) as chat:
        yield chat


@pytest.fixture(scope="session")
def red_png(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("images") / "red.png"
    Image.new("RGB", (64, 48), (255, 0, 0)).save(path, format="PNG")
    return path


@pytest.fixture(scope="session")
def spoken_wav(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SPOKEN said by espeak-ng, as a 16 kHz mono WAV (via sox), in a voice pocketsphinx reads well."""
    if shutil.which("espeak-ng") is None or shutil.which("sox") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("espeak-ng and sox must be installed in CI")
        pytest.skip("espeak-ng or sox is not installed")
    folder = tmp_path_factory.mktemp("speech")
    raw, wav = folder / "raw.wav", folder / "hello.wav"
    subprocess.run(["espeak-ng", "-v", "en-us+f2", "-s", "140", "-w", str(raw), SPOKEN], check=True)
    subprocess.run(["sox", str(raw), "-r", "16000", "-c", "1", "-b", "16", str(wav),
                    "pad", "0.3", "0.3", "gain", "-n", "-3"], check=True)
    return wav


def refusing_transport() -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        pytest.fail(f"nothing should have been sent, but {request.method} {request.url} was")

    return httpx.MockTransport(handler)


def mock_client(handler: Callable[[httpx.Request], httpx.Response], **kwargs: object) -> InferenceClient:
    chat = InferenceClient("http://instance.test", SECRET, transport=httpx.MockTransport(handler),
                           **kwargs)  # type: ignore[arg-type]
    chat._ops.policy = type(chat._ops.policy)(max_retries=2, backoff=0.001, max_backoff=0.002)
    return chat


MODELS = {"object": "list", "data": [{"id": "m1", "object": "model", "created": 0, "owned_by": "x"}]}


# models and chat ----------------------------------------------------------------------------


def test_models_are_listed_as_ids_and_records(client: InferenceClient) -> None:
    ids = client.models()
    assert ids and all(isinstance(model, str) for model in ids)
    records = client.model_records()
    assert [record.id for record in records] == ids
    assert records[0].owned_by and isinstance(records[0].created, int)


@pytest.mark.parametrize("suffix", ["", "/", "/v1", "/v1/"])
def test_endpoint_url_tolerates_a_trailing_slash_or_v1(box: Sandbox, suffix: str) -> None:
    with InferenceClient(box.inference_url + suffix, box.inference_secret) as chat:
        assert chat.endpoint_url == box.inference_url
        assert chat.models()


def test_chat_reply_reads_the_prompt(client: InferenceClient) -> None:
    reply = client.chat(PROMPT)
    assert isinstance(reply, ChatCompletion)
    content = reply.choices[0].message.content
    assert content and reply.text == content
    assert "okapi" in content.lower()
    assert reply.choices[0].message.role == "assistant"
    assert reply.finish_reason == "stop"
    assert reply.model == client.models()[0]
    assert reply.usage is not None and reply.usage.completion_tokens > 0
    assert reply.raw["object"] == "chat.completion"


def test_chat_takes_message_lists_and_passes_params_through(client: InferenceClient) -> None:
    messages = [{"role": "system", "content": "Be brief."},
                {"role": "user", "content": [{"type": "text", "text": PROMPT}]}]
    full = client.chat(messages, temperature=0)
    cut = client.chat(messages, max_tokens=2)
    assert cut.finish_reason == "length"
    assert full.text.startswith(cut.text) and len(cut.text) < len(full.text)
    assert client.chat(messages, model=client.models()[0]).text == full.text


def test_normalize_messages_conveniences(red_png: Path) -> None:
    assert normalize_messages("hi") == [{"role": "user", "content": "hi"}]
    [message] = normalize_messages(["What is this?", red_png])
    assert message["role"] == "user"
    text, image = message["content"]
    assert text == {"type": "text", "text": "What is this?"}
    assert image["image_url"]["url"].startswith("data:image/png;base64,")
    [message] = normalize_messages("Look", images=[red_png.read_bytes()])
    assert message["content"][0] == {"type": "text", "text": "Look"}
    assert message["content"][1]["image_url"]["url"].startswith("data:image/png;base64,")
    url = "https://example.com/cat.png"
    [message] = normalize_messages([{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": url}}]}])
    assert message["content"][0]["image_url"]["url"] == url
    with pytest.raises(InvalidInputError):
        normalize_messages([{"content": "no role"}])
    with pytest.raises(InvalidInputError):
        normalize_messages([])


# streaming ----------------------------------------------------------------------------------


def test_stream_joined_text_equals_the_whole_reply(client: InferenceClient) -> None:
    whole = client.chat(PROMPT).text
    stream = client.chat(PROMPT, stream=True)
    assert isinstance(stream, ChatStream)
    with stream:
        chunks = list(stream)
    assert len(chunks) > 3 and all(isinstance(chunk, ChatChunk) for chunk in chunks)
    assert "".join(chunk.delta for chunk in chunks) == whole == stream.text
    assert chunks[0].role == "assistant"
    assert chunks[-1].finish_reason == "stop" == stream.finish_reason
    assert stream.closed


def test_stream_reports_usage_when_asked(client: InferenceClient) -> None:
    stream = client.chat(PROMPT, stream=True, stream_options={"include_usage": True})
    assert stream.read() == client.chat(PROMPT).text
    assert stream.usage is not None and stream.usage.completion_tokens > 0


def test_closing_a_stream_early_leaves_the_client_usable(sandbox_factory) -> None:
    slow = sandbox_factory(stream_tokens_per_second=20)
    with InferenceClient(slow.inference_url, slow.inference_secret) as chat:
        whole = chat.chat(PROMPT).text
        with chat.chat(PROMPT, stream=True) as stream:
            received = [next(stream), next(stream)]
        assert stream.closed and len(received) == 2
        assert stream.text == "".join(chunk.delta for chunk in received) != whole
        assert list(stream) == []  # a closed stream yields nothing more
        stream.close()  # twice is fine
        assert chat.chat(PROMPT).text == whole
        assert chat.models()


def test_async_client_chats_and_streams(box: Sandbox) -> None:
    async def main() -> tuple[str, str, str]:
        async with AsyncInferenceClient(box.inference_url, box.inference_secret) as chat:
            assert await chat.models()
            whole = (await chat.chat(PROMPT)).text
            stream = await chat.chat(PROMPT, stream=True)
            async with stream:
                joined = "".join([chunk.delta async for chunk in stream])
            early = await chat.chat(PROMPT, stream=True)
            async with early:
                async for _ in early:
                    break
            assert early.closed
            again = (await chat.chat(PROMPT)).text
            return whole, joined, again

    whole, joined, again = asyncio.run(main())
    assert whole == joined == again and "okapi" in whole.lower()


def test_to_async_gives_a_twin(client: InferenceClient) -> None:
    async def main() -> str:
        async with client.to_async() as twin:
            assert twin.endpoint_url == client.endpoint_url and twin.secret_hint == client.secret_hint
            return await (await twin.chat(PROMPT, stream=True)).read()

    assert asyncio.run(main()) == client.chat(PROMPT).text


# images -------------------------------------------------------------------------------------


def assert_describes_red_png(text: str) -> None:
    lowered = text.lower()
    assert "png" in lowered and "red" in lowered
    assert "64" in text and "48" in text


def test_images_as_path_bytes_and_pil(client: InferenceClient, red_png: Path) -> None:
    image = Image.open(red_png)
    image.load()
    for source in (red_png, red_png.read_bytes(), image):
        reply = client.chat(["What is in this picture?", source])
        assert_describes_red_png(reply.text)
    reply = client.chat("What is in this picture?", images=[red_png])
    assert_describes_red_png(reply.text)


@pytest.fixture
def image_server(red_png: Path) -> Iterator[str]:
    """A local web server for the red PNG (the sandbox fetches http image URLs)."""
    folder = str(red_png.parent)

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, directory=folder, **kwargs)  # type: ignore[arg-type]

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02},
                              daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/{red_png.name}"
    server.shutdown()
    server.server_close()


def test_image_http_url_is_passed_through(client: InferenceClient, image_server: str) -> None:
    sent: list[dict[str, object]] = []
    [message] = normalize_messages([{"role": "user", "content": [
        "What is this?", {"type": "image_url", "image_url": {"url": image_server}}]}])
    sent.append(message)
    assert message["content"][1]["image_url"]["url"] == image_server  # type: ignore[index]
    # The sandbox never fetches a URL unless started with --allow-url-fetch, and never a
    # loopback one even then (issue 13): the client's sentence says how to send the image.
    with pytest.raises(BadRequestError, match="allow-url-fetch"):
        client.chat(sent)


# transcription ------------------------------------------------------------------------------


def test_transcription_of_spoken_words(client: InferenceClient, spoken_wav: Path) -> None:
    text = client.transcribe(spoken_wav)
    assert isinstance(text, str) and text.text == text
    heard = set(text.lower().split()) & set(SPOKEN.split())
    assert len(heard) >= 3, text  # pocketsphinx is an old, small model: most words will do
    assert text.raw == {"text": text.text}


def test_transcription_sends_file_and_model_parts() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"data": [{"id": "chat-1"}, {"id": "whisper-large"}]})
        return httpx.Response(200, json={"text": "hi there"})

    chat = mock_client(handler)
    assert chat.transcribe(silent_wav(0.5), language="en") == "hi there"
    body = seen[-1].read()
    assert seen[-1].headers["content-type"].startswith("multipart/form-data")
    assert b'name="file"; filename="audio.wav"' in body and b"whisper-large" in body
    assert b'name="language"' in body
    assert seen[-1].headers["x-api-key"] == SECRET
    assert chat.transcribe(io.BytesIO(silent_wav(0.5)), filename="q.wav").text == "hi there"
    assert b'filename="q.wav"' in seen[-1].read()


# errors -------------------------------------------------------------------------------------


def test_wrong_secret_is_an_authentication_error(box: Sandbox) -> None:
    with InferenceClient(box.inference_url, "sk-wrong-0000000000000000") as chat:
        with pytest.raises(AuthenticationError) as caught:
            chat.models()
        assert caught.value.status_code == 401
        with pytest.raises(AuthenticationError):
            chat.chat("hi", model="sandbox-vision-1", stream=True)


def test_unknown_model_is_not_found(client: InferenceClient) -> None:
    with pytest.raises(NotFoundError) as caught:
        client.chat("hi", model="no-such-model")
    assert str(caught.value).startswith("Model no-such-model not found.")
    with pytest.raises(NotFoundError):
        client.chat("hi", model="no-such-model", stream=True)
    with pytest.raises(NotFoundError) as caught:
        client.transcribe(silent_wav(0.5), model="no-such-model")
    assert "no-such-model" in str(caught.value)


def test_wrong_endpoint_url_says_so(box: Sandbox) -> None:
    with InferenceClient(box.management_url + "/nowhere", box.inference_secret) as chat, \
            pytest.raises(NotFoundError) as caught:
        chat.models()
    assert "endpoint URL" in str(caught.value)


def test_rate_limit_non_streaming_calls_retry_through_429(sandbox_factory) -> None:
    limited = sandbox_factory(inference_rate_limit=5, stream_tokens_per_second=5000)
    with InferenceClient(limited.inference_url, limited.inference_secret) as chat:
        model = chat.models()[0]
        replies = [chat.chat(PROMPT, model=model).text for _ in range(7)]
    assert len(set(replies)) == 1


def test_rate_limit_streaming_raises_at_once(sandbox_factory) -> None:
    limited = sandbox_factory(inference_rate_limit=1, stream_tokens_per_second=5000)
    with InferenceClient(limited.inference_url, limited.inference_secret) as chat:
        chat.chat(PROMPT, model="sandbox-vision-1", stream=True).read()
        with pytest.raises(RateLimitError) as caught:
            chat.chat(PROMPT, model="sandbox-vision-1", stream=True)
    assert caught.value.status_code == 429
    assert caught.value.retry_after is not None and 0 < caught.value.retry_after <= 1.5


def test_async_rate_limit_streaming_raises(sandbox_factory) -> None:
    limited = sandbox_factory(inference_rate_limit=1)

    async def main() -> None:
        async with AsyncInferenceClient(limited.inference_url, limited.inference_secret) as chat:
            await (await chat.chat("hi", model="sandbox-vision-1", stream=True)).aclose()
            with pytest.raises(RateLimitError):
                await chat.chat("hi", model="sandbox-vision-1", stream=True)

    asyncio.run(main())


def test_server_errors_are_retried_then_raised() -> None:
    calls: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        if request.url.path == "/v1/models":
            return httpx.Response(200, json=MODELS)
        return httpx.Response(500, json={"error": {"message": "CUDA out of memory"}})

    chat = mock_client(handler)
    with pytest.raises(ServerError) as caught:
        chat.chat("hi")
    assert caught.value.status_code == 500 and "CUDA out of memory" in str(caught.value)
    assert calls.count("/v1/chat/completions") == 3  # one try and two retries
    with pytest.raises(ServerError):
        chat.chat("hi", stream=True)
    assert calls.count("/v1/chat/completions") == 4  # a stream is never retried


def test_a_500_then_success_is_retried() -> None:
    calls: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        if len(calls) == 1:
            return httpx.Response(503, text="busy")
        return httpx.Response(200, json={"id": "c1", "model": "m1", "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "fine"}, "finish_reason": "stop"}]})

    assert mock_client(handler).chat("hi", model="m1").text == "fine"


@pytest.mark.parametrize(("status", "message", "error"), [
    (413, "The file is too large (26.0 MB); the limit is 25 MB.", FileTooLargeError),
    (400, "Unsupported file type ('ogg'): it is Ogg audio.", UnsupportedFileTypeError),
    (400, "The file is too large.", FileTooLargeError),
])
def test_upload_refusals_are_mapped(status: int, message: str, error: type[Exception]) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, json={"error": {"message": message, "type": "invalid_request_error"}})

    with pytest.raises(error) as caught:
        mock_client(handler).transcribe(silent_wav(0.5), model="whisper-1")
    assert str(caught.value).rstrip(".") == message.rstrip(".")


def test_a_stream_that_errors_midway_raises() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        body = (b'data: {"choices":[{"index":0,"delta":{"content":"Hel"}}]}\n\n'
                b'data: {"error":{"message":"engine crashed"}}\n\n')
        return httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})

    stream = mock_client(handler).chat("hi", model="m1", stream=True)
    assert next(stream).delta == "Hel"
    with pytest.raises(ServerError, match="engine crashed"):
        next(stream)
    assert stream.closed and stream.text == "Hel"


@pytest.fixture(scope="module")
def cut_server() -> Iterator[FakeChatServer]:
    """A real server whose streams end without a finish_reason or [DONE]."""
    with FakeChatServer(["Once", " upon", " a"], cut_off=True) as server:
        yield server


def test_a_stream_cut_off_before_its_end_raises_after_what_arrived(cut_server: FakeChatServer) -> None:
    with InferenceClient(cut_server.url, cut_server.secret) as chat:
        stream = chat.chat("Tell me a story", stream=True)
        deltas = []
        with pytest.raises(ConnectionFailedError, match="^The reply was cut off before it finished"):
            for chunk in stream:
                deltas.append(chunk.delta)
        assert "".join(deltas) == stream.text == "Once upon a"
        assert stream.closed and not stream.complete
        with pytest.raises(ConnectionFailedError, match="cut off"):
            chat.chat("Again", stream=True).read()
        assert chat.models() == [FakeChatServer.MODEL]  # the client stays usable


def test_async_stream_cut_off_raises(cut_server: FakeChatServer) -> None:
    async def main() -> str:
        async with AsyncInferenceClient(cut_server.url, cut_server.secret) as chat:
            stream = await chat.chat("Tell me a story", stream=True)
            with pytest.raises(ConnectionFailedError, match="cut off before it finished"):
                await stream.read()
            assert stream.closed and not stream.complete
            return stream.text

    assert asyncio.run(main()) == "Once upon a"


def test_a_whole_stream_is_complete(client: InferenceClient) -> None:
    with client.chat(PROMPT, stream=True) as stream:
        stream.read()
    assert stream.complete and stream.finish_reason == "stop"


def test_a_finish_reason_without_done_is_complete() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        body = (b'data: {"choices":[{"index":0,"delta":{"content":"Hi"}}]}\n\n'
                b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}\n\n')
        return httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})

    stream = mock_client(handler).chat("hi", model="m1", stream=True)
    assert stream.read() == "Hi" and stream.complete and stream.finish_reason == "length"


def test_a_json_answer_to_a_stream_request_becomes_one_chunk() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"id": "c1", "model": "m1", "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "whole"}, "finish_reason": "stop"}]})

    stream = mock_client(handler).chat("hi", model="m1", stream=True)
    assert [chunk.delta for chunk in stream] == ["whole"] and stream.finish_reason == "stop"


# refusals before anything is sent -----------------------------------------------------------


def test_text_renamed_png_is_refused_before_sending(tmp_path: Path) -> None:
    fake = tmp_path / "photo.png"
    fake.write_text("this is not an image at all\n" * 10)
    chat = InferenceClient("http://instance.test", SECRET, transport=refusing_transport())
    with pytest.raises(InvalidInputError, match="photo.png"):
        chat.chat(["What is this?", fake], model="m1")
    with pytest.raises(InvalidInputError):
        chat.chat("What is this?", images=[fake], model="m1")
    with pytest.raises(InvalidInputError):
        chat.chat([{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": str(fake)}}]}], model="m1", stream=True)


def test_text_file_as_audio_is_refused_before_sending(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("hello world\n")
    chat = InferenceClient("http://instance.test", SECRET, transport=refusing_transport())
    with pytest.raises(InvalidInputError, match="notes.txt"):
        chat.transcribe(notes, model="m1")
    with pytest.raises(InvalidInputError):
        chat.transcribe(notes)  # not even the model list is fetched


def test_audio_over_25_mb_is_refused_before_sending(tmp_path: Path) -> None:
    big = tmp_path / "long.wav"
    header = silent_wav(0.1)
    with big.open("wb") as out:
        out.write(header)
        out.truncate(26_000_000)
    chat = InferenceClient("http://instance.test", SECRET, transport=refusing_transport())
    with pytest.raises(InvalidInputError, match="25 MB"):
        chat.transcribe(big, model="m1")


def test_async_refusals_before_sending(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("hello\n")

    def handler(request: httpx.Request) -> httpx.Response:
        pytest.fail("nothing should have been sent")

    async def main() -> None:
        chat = AsyncInferenceClient("http://instance.test", SECRET,
                                    transport=httpx.MockTransport(handler))
        with pytest.raises(InvalidInputError):
            await chat.transcribe(notes)
        with pytest.raises(InvalidInputError):
            await chat.chat(["hi", notes.read_bytes()], stream=True)
        await chat.aclose()

    asyncio.run(main())


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(InvalidInputError):
        InferenceClient("instance.test", SECRET)
    with pytest.raises(InvalidInputError):
        InferenceClient("http://instance.test", "")
    chat = InferenceClient("http://instance.test", SECRET, transport=refusing_transport())
    with pytest.raises(InvalidInputError):
        chat.chat("hi", model="")
    with pytest.raises(InvalidInputError):
        chat.chat(42, model="m1")


# secrets ------------------------------------------------------------------------------------


def test_the_secret_never_shows(box: Sandbox, client: InferenceClient) -> None:
    assert SECRET not in repr(client) and SECRET not in str(vars(client))
    assert client.secret_hint == "sk-…4242"
    problems: list[Exception] = []
    for call in (lambda: client.chat("hi", model="nope"),
                 lambda: client.chat("hi", model="nope", stream=True),
                 lambda: client.transcribe(b"not audio")):
        try:
            call()
        except Exception as error:
            problems.append(error)
    with InferenceClient(box.inference_url, SECRET + "-wrong") as wrong:
        try:
            wrong.models()
        except Exception as error:
            problems.append(error)
    stream = client.chat(PROMPT, stream=True)
    texts = [repr(stream), *(f"{error!s} {error!r}" for error in problems)]
    stream.close()
    assert len(problems) == 4
    for text in texts:
        assert SECRET not in text


def test_a_secret_echoed_by_the_server_is_scrubbed() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        key = request.headers["x-api-key"]
        return httpx.Response(400, json={"error": {"message": f"bad request for key {key}"}})

    with pytest.raises(Exception) as caught:
        mock_client(handler).chat("hi", model="m1")
    assert SECRET not in str(caught.value) and "sk-…4242" in str(caught.value)
    with pytest.raises(Exception) as caught:
        mock_client(handler).chat("hi", model="m1", stream=True)
    assert SECRET not in str(caught.value)


def test_the_endpoint_and_secret_come_from_the_environment(sandbox_factory, monkeypatch) -> None:
    box = sandbox_factory()
    monkeypatch.setenv("GPUCLOUD_INFERENCE_URL", box.inference_url)
    monkeypatch.setenv("GPUCLOUD_INFERENCE_SECRET", box.inference_secret)
    with InferenceClient() as chat:
        assert chat.models()
        assert box.inference_secret not in repr(chat)
    monkeypatch.delenv("GPUCLOUD_INFERENCE_SECRET")
    with pytest.raises(InvalidInputError, match="set GPUCLOUD_INFERENCE_SECRET"):
        InferenceClient()
    monkeypatch.delenv("GPUCLOUD_INFERENCE_URL")
    with pytest.raises(InvalidInputError,
                       match="set GPUCLOUD_INFERENCE_URL and GPUCLOUD_INFERENCE_SECRET"):
        AsyncInferenceClient()


@pytest.mark.parametrize(("path", "body", "call", "sentence"), [
    ("/v1/models", {"models": []}, lambda chat: chat.models(), "model list is not in the expected"),
    ("/v1/chat/completions", {"id": "x"}, lambda chat: chat.chat("hi", model="m1"),
     "not a chat completion"),
    ("/v1/audio/transcriptions", {"words": []},
     lambda chat: chat.transcribe(silent_wav(0.1), model="m1"), "has no text"),
])
def test_a_success_of_the_wrong_shape_is_unreadable_not_a_server_error(
        path: str, body: object, call: Callable[[InferenceClient], object], sentence: str) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=body if request.url.path == path else MODELS)

    with pytest.raises(UnreadableResponseError, match=sentence) as caught:
        call(mock_client(handler))
    assert not isinstance(caught.value, APIError)  # the server did not fail: it answered oddly
