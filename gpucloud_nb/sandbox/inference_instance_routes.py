"""The sandbox's inference-instance routes (the appendix) and the app at each endpoint's address.

    >>> routes = inference_instance_routes(route, endpoints)  # doctest: +SKIP
    >>> app = endpoint_app(endpoints, inference)  # mounted at ENDPOINTS_PREFIX  # doctest: +SKIP

What the routes answer, and the choices where the appendix is silent, are the model's:
:mod:`gpucloud_nb.sandbox.inference_instances`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from gpucloud_nb.sandbox.http import Handler, Problem, json_response, now_ms, read_json_object
from gpucloud_nb.sandbox.inference_instances import (
    ENDPOINTS_PREFIX,
    HARDWARES,
    MODELS,
    Endpoints,
)

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["endpoint_app", "inference_instance_routes"]


def inference_instance_routes(route: Callable[[str, Mapping[str, Handler]], Route],
                              endpoints: Endpoints) -> list[BaseRoute]:
    """The appendix's catalogue and instance routes behind the sandbox's key check (its SSH-key
    routes: :func:`gpucloud_nb.sandbox.ssh_key_book.key_book_routes`)."""

    def base(request: Request) -> str:
        return str(request.base_url)

    async def models(request: Request) -> Response:
        return json_response(MODELS)

    async def hardwares(request: Request) -> Response:
        return json_response(HARDWARES)

    async def regions(request: Request) -> Response:
        return json_response(endpoints.regions_json(now_ms()))

    async def registries(request: Request) -> Response:
        raise Problem(400, "The sandbox has no private registries; deploy a catalogue model "
                           "(modelId).")

    async def list_instances(request: Request) -> Response:
        now = now_ms()
        return json_response([endpoints.instance_json(e, now, base(request))
                              for e in endpoints.endpoints.values()
                              if e.user == request.state.user])

    async def create(request: Request) -> Response:
        body = await read_json_object(request)
        now = now_ms()
        endpoint = endpoints.create(request.state.user, body, now)
        return json_response(endpoints.instance_json(endpoint, now, base(request)), status=201)

    async def get(request: Request) -> Response:
        endpoint = endpoints.find(request.state.user, request.path_params["id"])
        return json_response(endpoints.details_json(endpoint, now_ms(), base(request)))

    async def patch(request: Request) -> Response:
        endpoint = endpoints.find(request.state.user, request.path_params["id"])
        body = await read_json_object(request)
        now = now_ms()
        endpoints.update(endpoint, body, now)
        return json_response(endpoints.details_json(endpoint, now, base(request)))

    async def delete(request: Request) -> Response:
        endpoint = endpoints.find(request.state.user, request.path_params["id"])
        endpoints.delete(endpoint, now_ms())
        return Response(status_code=204)

    def action(name: str) -> Handler:
        async def handler(request: Request) -> Response:
            endpoint = endpoints.find(request.state.user, request.path_params["id"])
            now = now_ms()
            getattr(endpoints, name)(endpoint, now)
            return json_response(endpoints.instance_json(endpoint, now, base(request)))
        return handler

    return [
        route("/ai-inference/models", {"GET": models}),
        route("/ai-inference/hardwares", {"GET": hardwares}),
        route("/ai-inference/regions", {"GET": regions}),
        route("/ai-inference/registries", {"POST": registries, "PATCH": registries}),
        route("/ai-inference/instances", {"GET": list_instances, "POST": create}),
        route("/ai-inference/instances/{id}", {"GET": get, "PATCH": patch, "DELETE": delete}),
        route("/ai-inference/instances/{id}/start", {"POST": action("start")}),
        route("/ai-inference/instances/{id}/stop", {"POST": action("stop")}),
    ]


def endpoint_app(endpoints: Endpoints, inference: ASGIApp) -> ASGIApp:
    """The ASGI app at :data:`ENDPOINTS_PREFIX`: ``/<slug>/v1/...`` of one instance, answered by
    ``inference`` (the sandbox's inference app) once a container is ready."""
    from starlette._utils import get_route_path

    from gpucloud_nb.sandbox import speech, vision

    records = {m["id"]: m for m in (*vision.MODELS, *speech.MODELS)}

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        slug, _, rest = get_route_path(scope).lstrip("/").partition("/")
        try:
            endpoint = endpoints.by_slug.get(slug)
            if endpoint is None:
                raise Problem(404, f"There is no inference instance at {ENDPOINTS_PREFIX}/{slug}.",
                              code="endpoint_not_found")
            headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                       for k, v in scope["headers"]}
            secret = endpoints.authenticate(endpoint, headers.get("x-api-key"))
            if "/" + rest == "/v1/models" and scope["method"] in ("GET", "HEAD"):
                endpoints.refuse_if_down(endpoint, now_ms())  # listed without waking it
                model = endpoint.body["modelId"]
                record = records.get(model, {"id": model, "object": "model", "created": 0,
                                             "owned_by": "gpucloud-sandbox"})
                await json_response({"object": "list", "data": [record]})(scope, receive, send)
                return
            await endpoints.admit(endpoint)
        except Problem as problem:
            await problem.openai_response()(scope, receive, send)
            return
        try:
            inner_headers = [(k, v) for k, v in scope["headers"] if k.lower() != b"x-api-key"]
            inner_headers.append((b"x-api-key", secret.encode("latin-1")))
            inner = dict(scope, root_path=scope.get("root_path", "") + f"/{slug}",
                         headers=inner_headers)
            await inference(inner, receive, send)
        finally:
            endpoints.done(endpoint)

    return app

