"""The appendix's SSH-key book through a personal gateway: passed on to the upstream as it is.

    $ curl -H "x-api-key: $KEY" $GATEWAY/gpu-cloud/ssh-keys

A personal gateway's one person owns the whole upstream account, so the book
(``GET``/``POST /gpu-cloud/ssh-keys``, ``PATCH .../{id}/makedefault``, ``DELETE .../{id}``) is
theirs: every call goes on to the upstream with its key and the answer comes back scrubbed of
it, and a create through the gateway may name a key by ``sshKeyId``. Choice where the appendix
is silent: a class or hub gateway has no book (the spec's 404, as for any path it does not
serve). The upstream account's book is shared by everyone of the class, so one student could
delete or replace the key another logs in with; a client that finds no book sends the key's text
at create instead (:mod:`gpucloud_nb.client.key_book`).
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from gpucloud_nb.gateway.cloud_routes import Gate
from gpucloud_nb.gateway.keys import Person
from gpucloud_nb.sandbox.http import Problem, read_json_object

__all__ = ["KEYS_PATH", "key_book_routes"]

KEYS_PATH = "/gpu-cloud/ssh-keys"


def key_book_routes(gate: Gate) -> list[BaseRoute]:
    """The key-book routes of a personal ``gate``; none for a class or hub gateway."""
    if not gate.config.personal:
        return []

    async def passed_on(request: Request, person: Person) -> Response:
        body = await read_json_object(request) if request.method == "POST" else None
        status, data = await gate.upstream.call(request.method, request.url.path, json=body)
        return gate.relay(status, data, request)

    async def one_key(request: Request, person: Person) -> Response:
        id = request.path_params["id"]
        if not id or "/" in id:
            raise Problem(404, f"SSH key {id} not found.")
        return await passed_on(request, person)

    route = gate.route
    return [
        Route(KEYS_PATH, route(passed_on), methods=["GET", "POST"]),
        Route(KEYS_PATH + "/{id}/makedefault", route(one_key), methods=["PATCH"]),
        Route(KEYS_PATH + "/{id}", route(one_key), methods=["DELETE"]),
    ]
