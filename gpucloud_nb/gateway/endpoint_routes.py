"""The appendix's inference instances through the gateway, per person, counted in their money.

    $ curl -H "x-api-key: $STUDENT_KEY" $GATEWAY/ai-inference/instances

Same paths, bodies and statuses as the appendix (``../shared/spec/inference-instances-and-ssh-
keys.md``). The catalogue (models, hardwares, regions) passes through. A key sees only the
inference instances created with it: the list is filtered, and another key's id is the same 404
as an id that does not exist (a personal gateway filters nothing and adopts what it sees, as for
GPU instances). Choices where the appendix is silent:

- **Admitted against the budget.** A create is held as a GPU instance's is
  (:meth:`~gpucloud_nb.gateway.cloud_routes.Gate.admitted`, 402 with one sentence), at its worst:
  the hardware's ``hourlyPrice`` (from ``GET /ai-inference/hardwares``) × the most containers its
  scaling allows (the sum of ``max`` over its regions). With a budget and no price in the
  catalogue it is a 400: nothing can hold it. A ``PATCH`` that raises ``max`` is checked the same
  way for the containers it adds (402), without a reservation.
- **Billed per container-hour** (:mod:`gpucloud_nb.gateway.endpoint_meter`), in its owner's spend;
  at 100 % of a budget the watcher deletes inference instances as it deletes GPU instances, and
  ``delete_after`` timers and an instance's own budget (``/gateway/instances/{id}/...``) take an
  inference instance's id as well.
- **The endpoint through the gateway.** The upstream's endpoint wants the upstream account's key
  as its secret, which no student may hold; so ``address`` is rewritten to the gateway's
  ``/gateway/endpoints/{id}/``, where the person's own key is the secret and the gateway sends
  the request on to the upstream's address with its key (the answer streamed back as it comes;
  an error answer's text scrubbed of the key). Bodies there are bounded as the sandbox bounds
  its endpoint's, at :data:`ENDPOINT_BODY_BYTES` (64 MB: the spec's 20 MB images travel as
  base64 in JSON, and 25 MB audio as a form); the upstream's endpoint applies the spec's exact
  limits and its answer is relayed. Everywhere else a body is bounded at 1 MB.
- ``/ai-inference/registries`` (an account's private registry credentials) is a 400 through a
  class gateway (they would be shared by the whole class); a personal gateway passes it on.
- A create whose answer is lost is not adopted later by name (as a GPU instance's is): its
  reservation is closed after the reconcile grace; the watcher meters only what it owns.
"""

from __future__ import annotations

import math
from typing import Any

from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from gpucloud_nb.gateway import money
from gpucloud_nb.gateway.cloud_routes import Gate, mine_only
from gpucloud_nb.gateway.endpoint_meter import ENDPOINT, INSTANCES, per_container, upstream_path
from gpucloud_nb.gateway.keys import Person
from gpucloud_nb.gateway.upstream import UpstreamUnreachable, decode
from gpucloud_nb.media.limits import MB
from gpucloud_nb.sandbox.http import Problem, now_ms, read_json_object

__all__ = ["ENDPOINTS", "ENDPOINT_BODY_BYTES", "endpoint_routes", "most_containers"]

ENDPOINTS = "/gateway/endpoints"
"""Where the gateway serves each inference instance's endpoint: ``{ENDPOINTS}/{id}/v1/...``."""

ENDPOINT_BODY_BYTES = 64 * MB
"""The largest body sent on to an endpoint (the upstream's endpoint applies the spec's limits)."""


def most_containers(body: dict[str, Any]) -> int | None:
    """The most containers a create (or patch) body's scaling allows; ``None`` if unreadable.

        >>> most_containers({"autoScalingConfigurations": [{"scale": {"max": 2}},
        ...                                                {"scale": {"max": 1}}]})
        3
    """
    total = 0
    configurations = body.get("autoScalingConfigurations")
    if not isinstance(configurations, list):
        return None
    for item in configurations:
        scale = item.get("scale") if isinstance(item, dict) else None
        most = scale.get("max") if isinstance(scale, dict) else None
        if isinstance(most, bool) or not isinstance(most, int | float) or not math.isfinite(most):
            return None
        total += max(int(most), 0)
    return total


def endpoint_routes(gate: Gate) -> list[BaseRoute]:
    """The inference routes of ``gate`` (see the module docs)."""
    store, upstream, personal = gate.store, gate.upstream, gate.config.personal
    addresses: dict[str, str] = {}  # id → the upstream's address (it never changes)

    def check_owner(id: str, person: Person) -> None:
        if store.owner(id) != person.account and not personal:
            raise Problem(404, f"Inference instance {id} not found.")

    def ours(data: Any, request: Request) -> Any:
        """The upstream's record(s) with ``address`` the gateway's, the upstream's kept aside."""
        base = str(request.base_url).rstrip("/")
        for item in data if isinstance(data, list) else [data]:
            if isinstance(item, dict) and isinstance(item.get("_id"), str):
                if isinstance(item.get("address"), str):
                    addresses[item["_id"]] = item["address"]
                item["address"] = f"{base}{ENDPOINTS}/{item['_id']}/"
        return data

    def adopt(items: Any, person: Person) -> None:
        known = store.owned_ids(person.account, ENDPOINT)
        for item in items if isinstance(items, list) else [items]:
            id = item.get("_id") if isinstance(item, dict) else None
            if isinstance(id, str) and id and id not in known:
                store.add_owned(id, ENDPOINT, person.account, str(item.get("name") or id),
                                per_container(item) or 0.0, now_ms())

    async def price_each(hardware: Any) -> float | None:
        status, data = await upstream.call("GET", "/ai-inference/hardwares")
        for item in data if status == 200 and isinstance(data, list) else []:
            if isinstance(item, dict) and hardware in (item.get("name"), item.get("id")):
                return per_container(item)
        return None

    async def catalogue(request: Request, person: Person) -> Response:
        status, body = await upstream.send("GET", request.url.path)
        return gate.relay_body(status, body, request)

    async def registries(request: Request, person: Person) -> Response:
        if not personal:
            raise Problem(400, "Private registries hold the cloud account's credentials, shared "
                               "by everyone of this gateway; deploy a catalogue model (modelId).")
        body = await read_json_object(request)
        status, data = await upstream.call(request.method, request.url.path, json=body)
        return gate.relay(status, data, request)

    async def create(request: Request, person: Person) -> Response:
        body = await read_json_object(request)
        name = body.get("name")
        if not isinstance(name, str) or not name:
            raise Problem(400, "The field name must be a non-empty string.")
        gate.rate_limited(person.account)
        each, most = await price_each(body.get("hardwareName")), most_containers(body)
        if (each is None or most is None) and person.budget is not None:
            raise Problem(400, f"The upstream's catalogue gives no price for hardware "
                               f"{body.get('hardwareName')!r}, so your budget cannot hold it; "
                               "nothing was deployed.")
        worst = (each or 0.0) * (most or 0)
        rid = await gate.admitted(person, name, worst)
        gate.meter.inflight.add(rid)
        try:
            status, data = await upstream.call("POST", INSTANCES, json=body)
            if status in (200, 201) and isinstance(data, dict) and data.get("_id"):
                id = str(data["_id"])
                store.add_owned(id, ENDPOINT, person.account, name, worst, now_ms(), rid=rid)
                store.audit(now_ms(), person.account, "created", id, "asked")
                return gate.relay(status, ours(data, request), request)
            if status < 500:
                store.fail_reservation(rid)
            return gate.relay(status, data, request)
        finally:
            gate.meter.inflight.discard(rid)

    async def listing(request: Request, person: Person) -> Response:
        status, body = await upstream.send("GET", INSTANCES)
        if status != 200:
            return gate.relay_body(status, body, request)
        if personal:
            data = decode(body)
            adopt(data, person)
        else:
            kept = mine_only(body, store.owned_ids(person.account, ENDPOINT))
            data = decode(kept if kept is not None else b"[]")
        return gate.relay(status, ours(data, request), request)

    async def get(request: Request, person: Person) -> Response:
        id = request.path_params["id"]
        check_owner(id, person)
        status, data = await upstream.call("GET", upstream_path(id))
        if personal and status == 200 and store.owner(id) is None:
            adopt(data, person)
        return gate.relay(status, ours(data, request) if status == 200 else data, request)

    async def patch(request: Request, person: Person) -> Response:
        id = request.path_params["id"]
        check_owner(id, person)
        body = await read_json_object(request)
        record, new_most = store.find(id), most_containers(body)
        each = most = None
        if new_most is not None and record is not None:
            status, details = await upstream.call("GET", upstream_path(id))
            if status == 200 and isinstance(details, dict):
                each = per_container(details)
                most = most_containers({"autoScalingConfigurations": [
                    {"scale": c.get("scale")} for c in details.get("containers") or []
                    if isinstance(c, dict)]})
            added = new_most - (most or 0)
            if added > 0 and person.budget is not None:
                try:
                    money.check_volume(store, person, (each or 0.0) * added,
                                       gate.config.reserve_hours, now_ms(),
                                       what=f"{added} more container(s)", done="changed")
                except money.BudgetRefused as refused:
                    store.audit(now_ms(), person.account, "refused", id, str(refused))
                    raise Problem(402, str(refused)) from None
        status, data = await upstream.call("PATCH", upstream_path(id), json=body)
        if status == 200 and record is not None and each is not None and new_most is not None:
            store.update_owned(id, price=each * new_most, created_ms=record.created_ms,
                               status=record.status, deleted_ms=record.deleted_ms,
                               final=record.final)  # held at its new most from now on
        return gate.relay(status, ours(data, request) if status == 200 else data, request)

    async def delete(request: Request, person: Person) -> Response:
        id = request.path_params["id"]
        check_owner(id, person)
        status, data = await upstream.call("DELETE", upstream_path(id))
        if status < 300:
            store.ask_delete(id, now_ms(), "asked")
            store.audit(now_ms(), person.account, "deleted", id, f"asked (by {person.name})")
        return gate.relay(status, data, request)

    def action(name: str) -> Any:
        async def handler(request: Request, person: Person) -> Response:
            id = request.path_params["id"]
            check_owner(id, person)
            status, data = await upstream.call("POST", f"{upstream_path(id)}/{name}")
            return gate.relay(status, ours(data, request) if status == 200 else data, request)
        return handler

    async def endpoint(request: Request) -> Response:
        """``/gateway/endpoints/{id}/...``: the person's key checked, the request sent on."""
        try:
            person = await gate.identify(request)
        except Problem as problem:
            return Problem(401, problem.message, code="invalid_api_key").openai_response()
        id = request.path_params["id"]
        try:
            check_owner(id, person)
            if id not in addresses:
                status, data = await upstream.call("GET", upstream_path(id))
                if status != 200 or not isinstance(data, dict) \
                        or not isinstance(data.get("address"), str):
                    raise Problem(404, f"Inference instance {id} not found.",
                                  code="endpoint_not_found")
                addresses[id] = data["address"]
            url = addresses[id].rstrip("/") + "/" + request.path_params["rest"]
            answer = await upstream.endpoint(request.method, url, content=await request.body(),
                                             content_type=request.headers.get("content-type"))
        except Problem as problem:
            return problem.openai_response()
        except UpstreamUnreachable:
            return Problem(502, f"The upstream's endpoint of inference instance {id} did not "
                                "answer.", type="server_error").openai_response()
        headers = {k: v for k, v in answer.headers.items()
                   if k.lower() in ("content-type", "retry-after", "cache-control")}
        if answer.status_code >= 400:
            text = (await answer.aread()).decode("utf-8", "replace")
            await answer.aclose()
            return Response(upstream.scrub(text).encode(), status_code=answer.status_code,
                            headers=headers)
        return StreamingResponse(answer.aiter_raw(), status_code=answer.status_code,
                                 headers=headers, background=BackgroundTask(answer.aclose))

    return [
        Route("/ai-inference/models", gate.route(catalogue), methods=["GET"]),
        Route("/ai-inference/hardwares", gate.route(catalogue), methods=["GET"]),
        Route("/ai-inference/regions", gate.route(catalogue), methods=["GET"]),
        Route("/ai-inference/registries", gate.route(registries), methods=["POST", "PATCH"]),
        Route(INSTANCES, gate.route(create), methods=["POST"]),
        Route(INSTANCES, gate.route(listing), methods=["GET"]),
        Route(INSTANCES + "/{id}", gate.route(get), methods=["GET"]),
        Route(INSTANCES + "/{id}", gate.route(patch), methods=["PATCH"]),
        Route(INSTANCES + "/{id}", gate.route(delete), methods=["DELETE"]),
        Route(INSTANCES + "/{id}/start", gate.route(action("start")), methods=["POST"]),
        Route(INSTANCES + "/{id}/stop", gate.route(action("stop")), methods=["POST"]),
        Route(ENDPOINTS + "/{id}/{rest:path}", endpoint, methods=["GET", "POST"]),
    ]
