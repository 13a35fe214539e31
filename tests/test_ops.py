"""Retries, error mapping and the no-double-create rule, against failures injected in the transport.

These are failures a real server cannot easily produce on demand (a dropped connection after the
server acted, a Retry-After), so ``httpx.MockTransport`` stands in for the network here; the
happy paths are tested over real HTTP against the sandbox in ``test_management.py``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import httpx
import pytest

from gpucloud_nb import GPUCloud
from gpucloud_nb.client._ops import RetryPolicy, error_from_response
from gpucloud_nb.errors import (
    AuthenticationError,
    BadRequestError,
    ConnectionFailedError,
    FileTooLargeError,
    NotFoundError,
    RateLimitError,
    ServerError,
    UnreadableResponseError,
    UnsupportedFileTypeError,
)

KEY = "sk-test-0123456789abcdefWXYZ"
#: The key given with each create, so that a create is its one POST (without one, a client on
#: the real cloud first asks the account's key book: see client/key_book.py).
PUBLIC_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5 test@ops"
OFFER = {
    "gpuName": "H100", "gpuCount": 1, "nvlink": False, "deploymentType": "vm",
    "instanceId": "h100-1x", "cloudInitAvailable": True,
    "cloud": {"_id": "p1", "name": "Provider One"},
    "configuration": {"ramGB": 200, "storageGB": 1000, "vCpu": 26, "vRamGB": 80,
                      "os": ["ubuntu-22.04"], "interconnect": "PCIe"},
    "hourlyPrice": 2.5,
    "availability": [{"region": "us-east-1", "name": "US East", "countryCode": "US",
                      "available": True}],
}


def instance_json(name: str, id: str = "a" * 24) -> dict[str, object]:
    return {"_id": id, "name": name, "status": "pending", "hourlyPrice": 2.5,
            "createdAt": "2999-01-01T00:00:00.000Z"}


def make_cloud(handler: Callable[[httpx.Request], httpx.Response], **kwargs: object) -> GPUCloud:
    cloud = GPUCloud(api_key=KEY, base_url="http://cloud.test", transport=httpx.MockTransport(handler),
                     **kwargs)  # type: ignore[arg-type]
    cloud._core.policy = RetryPolicy(max_retries=3, backoff=0.001, max_backoff=0.002)
    return cloud


def test_reads_retry_through_5xx_and_connection_errors() -> None:
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        if len(calls) == 1:
            raise httpx.ConnectError("refused", request=request)
        if len(calls) == 2:
            return httpx.Response(503, json={"statusCode": 503, "message": "busy"})
        return httpx.Response(200, json=[])

    assert make_cloud(handler).volumes.list() == []
    assert len(calls) == 3
    assert all(c.headers["x-api-key"] == KEY for c in calls)


def test_retry_after_is_honoured() -> None:
    calls: list[float] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(time.monotonic())
        if len(calls) == 1:
            return httpx.Response(429, headers={"Retry-After": "1"}, json={"message": "slow down"})
        return httpx.Response(200, json=[])

    make_cloud(handler).volumes.list()
    assert calls[1] - calls[0] >= 0.95


def test_retries_that_run_out_name_the_last_status() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(500, json={"statusCode": 500, "message": "database down",
                                         "path": "/gpu-cloud/volumes", "timestamp": "t"})

    with pytest.raises(ServerError) as info:
        make_cloud(handler).volumes.list()
    assert info.value.status_code == 500
    assert "500" in str(info.value) and "Database down" in str(info.value)
    assert "4 attempts" in str(info.value)


def test_retry_count_is_configurable() -> None:
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return httpx.Response(502, text="bad gateway")

    cloud = make_cloud(handler)
    cloud._core.policy = RetryPolicy(max_retries=0)
    with pytest.raises(ServerError):
        cloud.volumes.list()
    assert len(calls) == 1


def test_lost_create_response_adopts_the_instance_instead_of_launching_twice() -> None:
    made: list[dict[str, object]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/gpu-cloud/instances/offers":
            return httpx.Response(200, json=[OFFER])
        if request.method == "POST":
            made.append(instance_json(json.loads(request.content)["name"], id=f"{len(made):024x}"))
            raise httpx.ReadTimeout("the answer was lost", request=request)
        if request.url.path == "/gpu-cloud/instances":
            return httpx.Response(200, json=made)
        return httpx.Response(404)

    cloud = make_cloud(handler)
    instance = cloud.instances.create(name="job", cloud_provider="p1", instance_id="h100-1x",
                                      region="us-east-1", vm={"os": "ubuntu-22.04"}, ssh_key=PUBLIC_KEY)
    assert len(made) == 1
    assert instance.id == made[0]["_id"]
    assert cloud.created_instance_ids == (instance.id,)


def test_create_retries_when_the_lost_request_made_nothing() -> None:
    posts = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/gpu-cloud/instances/offers":
            return httpx.Response(200, json=[OFFER])
        if request.method == "POST":
            posts.append(request)
            if len(posts) == 1:
                return httpx.Response(500, json={"message": "oops"})
            return httpx.Response(201, json=instance_json("job"))
        return httpx.Response(200, json=[])

    instance = make_cloud(handler).instances.create(
        name="job", cloud_provider="p1", instance_id="h100-1x", region="us-east-1",
        vm={"os": "ubuntu-22.04"}, ssh_key=PUBLIC_KEY)
    assert instance.name == "job"
    assert len(posts) == 2


def test_create_gives_up_with_a_clear_sentence() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/gpu-cloud/instances/offers":
            return httpx.Response(200, json=[OFFER])
        if request.method == "POST":
            raise httpx.RemoteProtocolError("dropped", request=request)
        return httpx.Response(200, json=[])

    with pytest.raises(ConnectionFailedError, match="nothing was launched"):
        make_cloud(handler).instances.create(
            name="job", cloud_provider="p1", instance_id="h100-1x", region="us-east-1",
            vm={"os": "ubuntu-22.04"}, ssh_key=PUBLIC_KEY)


def test_create_is_retried_after_429_without_lookup() -> None:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(f"{request.method} {request.url.path}")
        if request.url.path == "/gpu-cloud/instances/offers":
            return httpx.Response(200, json=[OFFER])
        if request.method == "POST" and seen.count("POST /gpu-cloud/instances") == 1:
            return httpx.Response(429, headers={"Retry-After": "0"})
        return httpx.Response(201, json=instance_json("job"))

    make_cloud(handler).instances.create(
        name="job", cloud_provider="p1", instance_id="h100-1x", region="us-east-1",
        vm={"os": "ubuntu-22.04"}, ssh_key=PUBLIC_KEY)
    assert "GET /gpu-cloud/instances" not in seen
    assert seen.count("POST /gpu-cloud/instances") == 2


@pytest.mark.parametrize(
    ("status", "body", "flavor", "cls", "words"),
    [
        (403, {"statusCode": 403, "message": "Forbidden"}, "management", AuthenticationError,
         "refused the API key"),
        (401, {"error": {"message": "bad secret"}}, "inference", AuthenticationError,
         "refused the secret"),
        (404, {"statusCode": 404, "message": "Cannot GET /x"}, "management", NotFoundError,
         "Cannot GET /x."),
        (429, None, "inference", RateLimitError, "Too many requests"),
        (500, "<html>boom</html>", "management", ServerError, "The server failed (500)."),
        (400, {"message": ["name must be a string", "region must be a string"]}, "management",
         BadRequestError, "Name must be a string; region must be a string."),
        (400, {"error": {"message": "File is too large"}}, "inference", FileTooLargeError, "large"),
        (400, {"message": "Unsupported file type: text/plain"}, "inference",
         UnsupportedFileTypeError, "Unsupported"),
    ],
)
def test_error_mapping(status: int, body: object, flavor: str, cls: type, words: str) -> None:
    request = httpx.Request("GET", "http://cloud.test/gpu-cloud/x")
    if isinstance(body, str):
        response = httpx.Response(status, text=body, request=request)
    elif body is None:
        response = httpx.Response(status, request=request)
    else:
        response = httpx.Response(status, json=body, request=request)
    error = error_from_response(response, flavor=flavor)  # type: ignore[arg-type]
    assert type(error) is cls
    assert words in str(error)
    assert error.status_code == status
    assert error.path == "/gpu-cloud/x"


def test_error_body_fields_are_kept() -> None:
    body = {"statusCode": 404, "timestamp": "2026-11-22T10:00:00.000Z",
            "path": "/gpu-cloud/volumes/v1", "message": "Volume v1 not found"}
    error = error_from_response(httpx.Response(404, json=body), what="Volume v1")
    assert (error.status_code, error.path, error.timestamp) == (404, body["path"], body["timestamp"])
    assert str(error) == "Volume v1 not found."


def test_the_key_never_appears_in_errors_or_reprs() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(403, json={"message": f"key {KEY} is not valid"})

    cloud = make_cloud(handler)
    with pytest.raises(AuthenticationError) as info:
        cloud.volumes.get("v1")
    texts = [str(info.value), repr(info.value), repr(cloud), str(vars(cloud)),
             str(vars(cloud._core)), repr(cloud._http.headers)]
    assert all(KEY not in text for text in texts)
    assert "WXYZ" in repr(cloud)  # the masked hint is still useful


@pytest.mark.parametrize(("body", "reason"), [
    (b"<html>maintenance</html>", "offers are not valid JSON"),
    (b'{"offers": []}', "offers are not a JSON array"),
])
def test_an_unreadable_offers_body_is_one_sentence(body: bytes, reason: str) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=body, headers={"content-type": "application/json"})

    with pytest.raises(UnreadableResponseError) as info:
        make_cloud(handler).instances.offers_frame()
    assert str(info.value) == ("The server's answer to GET /gpu-cloud/instances/offers was "
                               f"unreadable: {reason}.")


def test_an_empty_offers_body_is_an_empty_frame() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=b"")

    frame = make_cloud(handler).instances.offers_frame()
    assert frame.empty and "hourlyPrice" in frame.columns


def test_lost_create_whose_lookup_also_fails_says_to_look_first() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/gpu-cloud/volumes/offers":
            return httpx.Response(200, json=[{"cloudProvider": {"_id": "p1", "displayName": "P"},
                                              "minSizeInGb": 10, "pricePerGbPerHour": "0.0001",
                                              "regions": ["eu-1"]}])
        if request.method == "POST":
            raise httpx.ReadTimeout("lost", request=request)
        return httpx.Response(503, json={"message": "listing is down"})

    with pytest.raises(ConnectionFailedError) as info:
        make_cloud(handler).volumes.create(name="data", cloud_provider="p1", region="eu-1",
                                           size_in_gb=10)
    message = str(info.value)
    assert message.startswith("Creating volume 'data': the answer was lost")
    assert "checking whether it was created failed too" in message
    assert "look at the list of volumes before trying again" in message


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [({"Retry-After": "3"}, 3.0), ({"Retry-After": "3", "retry-after-ms": "250"}, 0.25),
     ({"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}, 0.0), ({"Retry-After": "soon"}, None)],
)
def test_retry_after_forms(headers: dict[str, str], seconds: float | None) -> None:
    error = error_from_response(httpx.Response(429, headers=headers))
    assert error.retry_after == seconds


# a 3xx is an error, never a success ------------------------------------------------------------


def moved(location: str | None = "https://me:hunter2@new.example/api/gpu-cloud/instances"):
    """A handler answering offers normally and everything else 301 with no body."""
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.path == "/gpu-cloud/instances/offers":
            return httpx.Response(200, json=[OFFER])
        headers = {} if location is None else {"location": location}
        return httpx.Response(301, headers=headers)

    return handler, seen


def test_a_301_with_no_body_is_an_error_naming_the_location() -> None:
    from gpucloud_nb.errors import RedirectError

    handler, seen = moved("https://me:hunter2@new.example/api/gpu-cloud/instances")
    cloud = make_cloud(handler)
    calls = {
        "list": cloud.instances.list,
        "get": lambda: cloud.instances.get("a" * 24),
        "delete": lambda: cloud.instances.delete("a" * 24),
        "volumes": cloud.volumes.list,
        "create": lambda: cloud.instances.create(
            name="x", cloud_provider="p1", instance_id="h100-1x", region="us-east-1",
            vm={"os": "ubuntu-22.04"}, ssh_key=PUBLIC_KEY),
    }
    for name, call in calls.items():
        with pytest.raises(RedirectError) as caught:
            call()
        message = str(caught.value)
        assert caught.value.status_code == 301, name
        assert "hunter2" not in message and "me:" not in message, message
        assert "new.example" in message, message
    assert len(seen) == 6  # one request each (offers once for the create): never retried
    sentence = r"^The base URL redirects to https://\*\*\*@new\.example/api; use that\.$"
    with pytest.raises(RedirectError, match=sentence):
        cloud.instances.list()


def test_a_redirect_without_location_still_fails() -> None:
    from gpucloud_nb.errors import RedirectError

    handler, _ = moved(None)
    with pytest.raises(RedirectError, match="without a Location"):
        make_cloud(handler).instances.delete("a" * 24)


def test_the_inference_client_treats_a_redirect_as_an_error() -> None:
    from gpucloud_nb import InferenceClient
    from gpucloud_nb.errors import RedirectError

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(302, headers={"location": "http://other.test/v1/models"})

    client = InferenceClient("http://endpoint.test", "secret-0123456789abcdef",
                             transport=httpx.MockTransport(handler))
    with pytest.raises(RedirectError, match="endpoint URL redirects to http://other.test"):
        client.models()
    with pytest.raises(RedirectError):
        client.chat([{"role": "user", "content": "hi"}], model="m", stream=True)
