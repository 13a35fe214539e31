"""The sandbox's inference endpoint on the wire: shapes, statuses, rate limit, uploads, upstream."""

from __future__ import annotations

import base64
import io
import json
import time
from collections.abc import Iterator

import httpx
import pytest
from httpx_sse import connect_sse
from PIL import Image
from samples import silent_wav

from gpucloud_nb import InferenceClient
from gpucloud_nb.client._ops import error_from_response
from gpucloud_nb.errors import FileTooLargeError, UnsupportedFileTypeError
from gpucloud_nb.sandbox import Sandbox
from gpucloud_nb.sandbox.inference.ratelimit import TokenBuckets
from gpucloud_nb.sandbox.inference.upstream import UPSTREAM_KEY_VARIABLE, upstream_base

MODEL = "sandbox-vision-1"
PROMPT = "Please tell me about the okapi"


@pytest.fixture(scope="module")
def box() -> Iterator[Sandbox]:
    """One fast-streaming sandbox for the module: the inference endpoint keeps no state."""
    with Sandbox(stream_tokens_per_second=5000) as sandbox:
        yield sandbox


@pytest.fixture(scope="module")
def api(box: Sandbox) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=box.inference_url, timeout=30,
                      headers={"x-api-key": box.inference_secret}) as client:
        yield client


@pytest.fixture(scope="module")
def plain() -> Iterator[httpx.Client]:
    """A client with no secret, for full URLs (one SSL context for the module, not one a call)."""
    with httpx.Client(timeout=30) as client:
        yield client


def chat_body(**extra: object) -> dict[str, object]:
    return {"model": MODEL, "messages": [{"role": "user", "content": PROMPT}], **extra}


def error_of(response: httpx.Response) -> dict[str, object]:
    body = response.json()
    assert set(body) == {"error"}
    assert {"message", "type", "param", "code"} <= set(body["error"])
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    return body["error"]  # type: ignore[no-any-return]


# shapes -------------------------------------------------------------------------------------


def test_models_list_has_the_openai_shape(api: httpx.Client) -> None:
    response = api.get("/v1/models")
    assert response.status_code == 200
    body = response.json()
    assert body["object"] == "list" and body["data"]
    for model in body["data"]:
        assert set(model) == {"id", "object", "created", "owned_by"}
        assert model["object"] == "model" and isinstance(model["created"], int)
    assert body["data"][0]["id"] == MODEL


def test_chat_completion_has_the_openai_shape(api: httpx.Client) -> None:
    body = api.post("/v1/chat/completions", json=chat_body()).json()
    assert body["id"].startswith("chatcmpl-") and body["object"] == "chat.completion"
    assert isinstance(body["created"], int) and body["model"] == MODEL
    [choice] = body["choices"]
    assert choice["index"] == 0 and choice["finish_reason"] == "stop"
    assert choice["message"]["role"] == "assistant" and choice["message"]["content"]
    usage = body["usage"]
    assert usage["prompt_tokens"] == len(PROMPT.split())
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"] > 0


def test_stream_events_have_the_openai_shape(api: httpx.Client) -> None:
    whole = api.post("/v1/chat/completions", json=chat_body()).json()
    body = chat_body(stream=True, stream_options={"include_usage": True})
    with connect_sse(api, "POST", "/v1/chat/completions", json=body) as source:
        assert source.response.headers["content-type"].startswith("text/event-stream")
        data = [event.data for event in source.iter_sse()]
    assert data[-1] == "[DONE]"
    chunks = [json.loads(item) for item in data[:-1]]
    assert all(chunk["object"] == "chat.completion.chunk" and chunk["model"] == MODEL
               for chunk in chunks)
    assert len({chunk["id"] for chunk in chunks}) == 1
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    *content, last, usage = chunks
    assert all(chunk["choices"][0]["finish_reason"] is None for chunk in content)
    assert last["choices"][0]["finish_reason"] == "stop"
    text = "".join(chunk["choices"][0]["delta"].get("content", "") for chunk in content)
    assert text == whole["choices"][0]["message"]["content"]
    assert usage["choices"] == [] and usage["usage"] == whole["usage"]


def test_stream_paces_words_at_the_configured_rate(sandbox_factory) -> None:
    box = sandbox_factory(stream_tokens_per_second=100)
    with InferenceClient(box.inference_url, box.inference_secret) as chat:
        started = time.monotonic()
        stream = chat.chat(PROMPT, model=MODEL, stream=True)
        chunks = list(stream)
        elapsed = time.monotonic() - started
    words = len(chunks) - 2  # the role chunk and the finish chunk carry no word
    assert words >= 5
    assert elapsed >= 0.8 * words / 100


# auth and errors ----------------------------------------------------------------------------


def test_secret_is_required(box: Sandbox, plain: httpx.Client) -> None:
    url = box.inference_url + "/v1/models"
    for headers in ({}, {"x-api-key": "wrong"}, {"authorization": "Bearer wrong"}):
        response = plain.get(url, headers=headers)
        assert response.status_code == 401
        assert error_of(response)["code"] == "invalid_api_key"
        assert box.inference_secret not in response.text
    bearer_only = plain.get(url, headers={"authorization": f"Bearer {box.inference_secret}"})
    assert bearer_only.status_code == 401  # the real endpoint documents x-api-key only
    assert "x-api-key" in error_of(bearer_only)["message"]
    assert "Bearer" in error_of(bearer_only)["message"]  # the hint says why
    assert box.inference_secret not in bearer_only.text
    assert plain.get(url, headers={"x-api-key": box.inference_secret}).status_code == 200
    with_both = plain.get(url, headers={"x-api-key": box.inference_secret,
                                        "authorization": "Bearer not-the-secret"})
    assert with_both.status_code == 200  # what the openai SDK sends with default_headers


def test_unknown_model_is_404_in_openai_shape(api: httpx.Client) -> None:
    response = api.post("/v1/chat/completions", json={**chat_body(), "model": "gpt-99"})
    assert response.status_code == 404
    error = error_of(response)
    assert error["message"] == "The model 'gpt-99' does not exist."
    assert error["code"] == "model_not_found" and error["type"] == "invalid_request_error"


def test_unknown_path_and_method(api: httpx.Client) -> None:
    response = api.get("/v1/nothing")
    assert response.status_code == 404 and error_of(response)["code"] == "unknown_url"
    assert api.get("/v1/chat/completions").status_code == 405


@pytest.mark.parametrize("body", [
    b"not json",
    b"[1, 2]",
    b"{}",
    json.dumps({"model": MODEL}).encode(),
    json.dumps({"model": MODEL, "messages": []}).encode(),
    json.dumps({"model": MODEL, "messages": ["hi"]}).encode(),
    json.dumps({"model": MODEL, "messages": [{"role": "wizard", "content": "hi"}]}).encode(),
    json.dumps({"model": MODEL, "messages": [{"role": "user", "content": 42}]}).encode(),
    json.dumps({"model": MODEL, "messages": [{"role": "user", "content": [{"type": "video"}]}]}).encode(),
    json.dumps({"model": MODEL, "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": "no-object"}]}]}).encode(),
    json.dumps({"model": MODEL, "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,bm90IGFuIGltYWdl"}}]}]}).encode(),
    json.dumps({**chat_body(), "max_tokens": 0}).encode(),
    json.dumps({**chat_body(), "temperature": "hot"}).encode(),
    json.dumps({**chat_body(), "stream": "yes"}).encode(),
    json.dumps({**chat_body(), "stream_options": {"include_usage": True}}).encode(),
    json.dumps({"model": 7, "messages": [{"role": "user", "content": "hi"}]}).encode(),
])
def test_malformed_chat_bodies_are_400(api: httpx.Client, body: bytes) -> None:
    response = api.post("/v1/chat/completions", content=body,
                        headers={"content-type": "application/json"})
    assert response.status_code == 400, response.text
    error_of(response)


def test_images_are_checked_and_web_images_downloaded(api: httpx.Client, box: Sandbox) -> None:
    def ask(url: str) -> httpx.Response:
        return api.post("/v1/chat/completions", json={"model": MODEL, "messages": [
            {"role": "user", "content": [{"type": "text", "text": "What is this?"},
                                         {"type": "image_url", "image_url": {"url": url}}]}]})

    missing = ask(box.management_url + "/no-such-image.png")
    assert missing.status_code == 400 and error_of(missing)["code"] == "invalid_image_url"
    assert ask("ftp://example.com/cat.png").status_code == 400
    bmp = io.BytesIO()
    Image.new("RGB", (4, 4), "blue").save(bmp, format="BMP")
    refused = ask("data:image/bmp;base64," + base64.b64encode(bmp.getvalue()).decode())
    assert refused.status_code == 400 and "BMP" in error_of(refused)["message"]
    png = io.BytesIO()
    Image.new("RGB", (4, 4), "blue").save(png, format="PNG")
    reply = ask("data:image/png;base64," + base64.b64encode(png.getvalue()).decode())
    assert reply.status_code == 200
    assert "blue" in reply.json()["choices"][0]["message"]["content"]


def test_rate_limit_gives_429_with_retry_after(sandbox_factory, plain: httpx.Client) -> None:
    box = sandbox_factory(inference_rate_limit=2)
    headers = {"x-api-key": box.inference_secret}
    url = box.inference_url + "/v1/models"
    statuses = [plain.get(url, headers=headers) for _ in range(4)]
    assert [r.status_code for r in statuses[:2]] == [200, 200]
    limited = statuses[-1]
    assert limited.status_code == 429
    assert error_of(limited)["code"] == "rate_limit_exceeded"
    assert int(limited.headers["retry-after"]) >= 1
    assert 0 < int(limited.headers["retry-after-ms"]) <= 1000
    time.sleep(int(limited.headers["retry-after-ms"]) / 1000 + 0.05)
    assert plain.get(url, headers=headers).status_code == 200
    assert plain.get(url).status_code == 401  # a request without the secret is not counted


def test_each_account_has_its_own_secret_and_rate_limit(sandbox_factory,
                                                        plain: httpx.Client) -> None:
    keys = ("student-b-key-0123456789", "student-c-key-0123456789")
    box = sandbox_factory(keys=keys, inference_rate_limit=0.5)  # one request, then 2 s apart

    def own(key: str) -> str:
        answer = plain.get(f"{box.management_url}/sandbox/inference", headers={"x-api-key": key})
        assert answer.status_code == 200 and answer.json()["url"] == box.inference_url
        return str(answer.json()["secret"])

    secrets = [own(key) for key in (box.api_key, *keys)]
    assert secrets[0] == box.inference_secret and len(set(secrets)) == 3
    assert not any(key in secret for key in (box.api_key, *keys) for secret in secrets)
    assert plain.get(f"{box.management_url}/sandbox/inference").status_code == 403

    def models(secret: str) -> int:
        return plain.get(box.inference_url + "/v1/models",
                         headers={"x-api-key": secret}).status_code

    teacher, b, c = secrets
    assert [models(teacher), models(teacher)] == [200, 429]  # the teacher's bucket is empty ...
    assert [models(b), models(b)] == [200, 429]               # ... B's is its own ...
    assert models(c) == 200                                   # ... and so is C's
    assert models(b + "x") == models(box.api_key) == models(keys[0]) == 401  # keys are not secrets


def test_token_buckets() -> None:
    now = [0.0]
    buckets = TokenBuckets(rate=2, clock=lambda: now[0])
    assert buckets.take("a") == buckets.take("a") == 0.0
    assert buckets.take("a") == pytest.approx(0.5)
    assert buckets.take("b") == 0.0  # per key
    now[0] = 0.5
    assert buckets.take("a") == 0.0
    with pytest.raises(ValueError):
        TokenBuckets(rate=0)


# uploads ------------------------------------------------------------------------------------


def post_audio(api: httpx.Client, data: bytes, name: str = "a.wav", **fields: str) -> httpx.Response:
    return api.post("/v1/audio/transcriptions", data={"model": MODEL, **fields},
                    files={"file": (name, data, "application/octet-stream")})


def test_transcription_answers_text(api: httpx.Client) -> None:
    response = post_audio(api, silent_wav())
    assert response.status_code == 200 and isinstance(response.json()["text"], str)
    plain = post_audio(api, silent_wav(), response_format="text")
    assert plain.headers["content-type"].startswith("text/plain")
    verbose = post_audio(api, silent_wav(), response_format="verbose_json").json()
    assert verbose["duration"] == pytest.approx(0.2)


def test_a_file_over_25_mb_is_413_and_maps_to_file_too_large(api: httpx.Client) -> None:
    response = post_audio(api, b"\0" * 26_000_000)
    assert response.status_code == 413
    assert error_of(response)["message"] == "The file is too large (26.0 MB); the limit is 25 MB."
    assert isinstance(error_from_response(response, flavor="inference"), FileTooLargeError)


def test_a_text_file_is_an_unsupported_type(api: httpx.Client) -> None:
    response = post_audio(api, b"hello world\n" * 20, name="notes.txt")
    assert response.status_code == 400
    assert error_of(response)["message"].startswith("Unsupported file type ('txt')")
    assert isinstance(error_from_response(response, flavor="inference"), UnsupportedFileTypeError)


@pytest.mark.parametrize(("kwargs", "status"), [
    ({"files": None, "data": {"model": MODEL}}, 400),
    ({"files": {"file": ("a.wav", silent_wav())}, "data": {}}, 400),
    ({"files": {"file": ("a.wav", silent_wav())}, "data": {"model": "nope"}}, 404),
    ({"files": {"file": ("a.wav", silent_wav())},
      "data": {"model": MODEL, "response_format": "xml"}}, 400),
])
def test_bad_transcription_requests(api: httpx.Client, kwargs: dict[str, object], status: int) -> None:
    files = kwargs["files"] or {"other": ("x.txt", b"x")}
    response = api.post("/v1/audio/transcriptions", files=files, data=kwargs["data"])  # type: ignore[arg-type]
    assert response.status_code == status, response.text
    error_of(response)


def test_transcription_needs_multipart(api: httpx.Client) -> None:
    response = api.post("/v1/audio/transcriptions", json={"model": MODEL})
    assert response.status_code == 400
    error_of(response)


# upstream -----------------------------------------------------------------------------------


def test_upstream_base() -> None:
    assert upstream_base("http://h:8000/v1/") == "http://h:8000"
    assert upstream_base("http://h:11434") == "http://h:11434"
    with pytest.raises(ValueError):
        upstream_base("h:8000")


def test_upstream_forwards_models_chat_streams_and_transcriptions(sandbox_factory, monkeypatch,
                                                                  plain: httpx.Client) -> None:
    real = sandbox_factory(inference_secret="upstream-secret-0123456789", stream_tokens_per_second=5000)
    monkeypatch.setenv(UPSTREAM_KEY_VARIABLE, "upstream-secret-0123456789")
    proxy = sandbox_factory(upstream=real.inference_url + "/v1", inference_secret="proxy-secret")
    with InferenceClient(real.inference_url, real.inference_secret) as direct, \
            InferenceClient(proxy.inference_url, "proxy-secret") as forwarded:
        assert forwarded.models() == direct.models()
        assert forwarded.chat(PROMPT).text == direct.chat(PROMPT).text
        stream = forwarded.chat(PROMPT, stream=True)
        assert stream.read() == direct.chat(PROMPT).text and stream.finish_reason == "stop"
        assert forwarded.transcribe(silent_wav()) == direct.transcribe(silent_wav())
        with pytest.raises(Exception) as caught:
            forwarded.chat("hi", model="nope")
        assert "nope" in str(caught.value)
    assert plain.get(proxy.inference_url + "/v1/models",
                     headers={"x-api-key": real.inference_secret}).status_code == 401


def test_upstream_refusing_the_key_is_502_not_401(sandbox_factory, monkeypatch,
                                                   plain: httpx.Client) -> None:
    real = sandbox_factory(inference_secret="upstream-secret-0123456789")
    monkeypatch.delenv(UPSTREAM_KEY_VARIABLE, raising=False)
    proxy = sandbox_factory(upstream=real.inference_url)
    headers = {"x-api-key": proxy.inference_secret}
    for response in (plain.get(proxy.inference_url + "/v1/models", headers=headers),
                     plain.post(proxy.inference_url + "/v1/chat/completions", headers=headers,
                                json=chat_body(stream=True))):
        assert response.status_code == 502
        error = error_of(response)
        assert error["code"] == "upstream_refused" and UPSTREAM_KEY_VARIABLE in error["message"]


def test_unreachable_upstream_is_502(sandbox_factory, plain: httpx.Client) -> None:
    proxy = sandbox_factory(upstream="http://127.0.0.1:9")
    response = plain.get(proxy.inference_url + "/v1/models",
                         headers={"x-api-key": proxy.inference_secret})
    assert response.status_code == 502
    assert error_of(response)["code"] == "upstream_unreachable"


UPSTREAM_KEY = "upstream-key-Zq81-0123456789abcdef"
PROXY_SECRET = "proxy-secret-Zq81-fedcba9876543210"
URL_PASSWORD = "hunter2-Zq81-password"


def test_upstream_error_bodies_and_url_passwords_are_scrubbed(sandbox_factory, monkeypatch,
                                                              plain: httpx.Client) -> None:
    """An upstream that echoes its key, the sandbox's secret and the URL's password in errors
    (status bodies and an error event mid-stream): none of them comes back, nor shows anywhere."""
    from benchmarks.bench_chat import FakeChatServer
    from gpucloud_nb._secrets import mask
    from gpucloud_nb.errors import ServerError

    monkeypatch.setenv(UPSTREAM_KEY_VARIABLE, UPSTREAM_KEY)
    echo = (f"bad request with key {UPSTREAM_KEY}, secret {PROXY_SECRET}, password {URL_PASSWORD} "
            f"from http://bob:{URL_PASSWORD}@127.0.0.1:9/v1")
    needles = ("Zq81", "0123456789abcdef", "fedcba9876543210", "hunter2")
    with FakeChatServer(["Hi"], status=500, secret=UPSTREAM_KEY, fail_with=echo) as failing, \
            FakeChatServer(["Hi"], secret=UPSTREAM_KEY, fail_with=echo) as mid_stream:
        texts = []
        for server in (failing, mid_stream):
            upstream = server.url.replace("http://", f"http://bob:{URL_PASSWORD}@") + "/v1"
            proxy = sandbox_factory(upstream=upstream, inference_secret=PROXY_SECRET)
            headers = {"x-api-key": PROXY_SECRET}
            url = proxy.inference_url + "/v1/chat/completions"
            body = chat_body(model=FakeChatServer.MODEL)
            texts += [plain.post(url, headers=headers, json=body).text,
                      plain.post(url, headers=headers, json={**body, "stream": True}).text,
                      repr(proxy.config), repr(proxy)]
            with InferenceClient(proxy.inference_url, PROXY_SECRET) as client, \
                    pytest.raises(ServerError) as caught:
                client.chat(PROMPT, model=FakeChatServer.MODEL, stream=True).read()
            texts += [str(caught.value), repr(caught.value)]
        hint = mask(UPSTREAM_KEY)
        assert hint in texts[0] and "http://***@127.0.0.1:9/v1" in texts[0]  # the body, scrubbed
        assert hint in texts[1]  # the same, answering a stream request
        assert hint in texts[7] and "[DONE]" not in texts[7]  # the error event, relayed scrubbed
        assert hint in texts[10]  # and as the client reports it
    leaked = [(needle, text) for text in texts for needle in needles if needle in text]
    assert not leaked, leaked[:3]


def test_upstream_url_password_never_shows_in_errors_or_cli_output(sandbox_factory,
                                                                  plain: httpx.Client, capsys) -> None:
    from gpucloud_nb.sandbox import cli

    proxy = sandbox_factory(upstream=f"http://bob:{URL_PASSWORD}@127.0.0.1:9")
    response = plain.get(proxy.inference_url + "/v1/models",
                         headers={"x-api-key": proxy.inference_secret})
    assert response.status_code == 502 and "http://127.0.0.1:9" in response.text
    assert cli.main(["sandbox", "--upstream", f"ftp://bob:{URL_PASSWORD}@127.0.0.1:9"]) == 2
    out, err = capsys.readouterr()
    assert "ftp://***@127.0.0.1:9" in err
    for text in (response.text, repr(proxy.config), out, err):
        assert "hunter2" not in text and "Zq81" not in text
