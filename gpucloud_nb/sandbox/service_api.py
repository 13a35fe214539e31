"""Sandbox-only endpoints (not part of the cloud's interface).

    $ curl -H "x-api-key: $KEY" $BASE/sandbox/status

Every path but the challenge needs ``x-api-key``, and each key sees only its own account:

- ``GET /sandbox/challenge?nonce=N`` (no key): ``{"proof"}``, the HMAC that proves this server is
  the home's service (:func:`gpucloud_nb.sandbox.service.challenge_proof` of the nonce, the pid
  and the port the request came in on, keyed by the home's challenge secret). ``connect()`` asks
  it before it sends any key; 400 for a nonce that is not 16 to 128 hex digits, 404 from a
  server that is not a home's service.
- ``GET /sandbox/service``: ``{"pid", "startedAt"}`` of the serving process.
- ``GET /sandbox/status``: ``pid``, ``startedAt``, ``instances`` (count by status), ``volumes``
  and ``spend`` (dollars so far: hourly price × time active or deleting; a launch
  that ended in ``error`` costs nothing; see :func:`gpucloud_nb.sandbox.lifecycle.spend`).
- ``GET /sandbox/inference``: ``{"url", "secret"}``, the inference endpoint's base (before
  ``/v1``) and this account's own inference secret (each ``--keys`` account has its own).
- ``POST /sandbox/ssh-keys`` with ``{"keys": [OpenSSH public key, ...]}``: accept these keys
  for instances created without ``sshKey`` (the package's SSH client registers the keys it
  offers before it connects); 200 with ``{"added": n}`` (keys already known are not added
  twice), 400 if any is not one valid public key (then none is added).

The sandbox keeps no money rule (issue #36): ``delete_after`` timers, budgets and idle deletes
are kept by a gateway in front of it (:mod:`gpucloud_nb.gateway`), as on the real cloud.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from gpucloud_nb.sandbox.http import Handler, Problem, json_response, now_ms, read_json_object
from gpucloud_nb.sandbox.lifecycle import iso, spend, status_of
from gpucloud_nb.sandbox.service import challenge_proof, challenge_secret
from gpucloud_nb.sandbox.store import Store

if TYPE_CHECKING:
    pass

__all__ = ["service_routes"]

log = logging.getLogger("uvicorn.error")  # the service log, next to uvicorn's own lines
_NONCE = re.compile(r"[0-9a-f]{16,128}")


def service_routes(route: Callable[[str, Mapping[str, Handler]], BaseRoute], store: Store, *,
                   home: str | os.PathLike[str] | None,
                   inference_secrets: Mapping[str, str],
                   bill_factor: float = 1.0) -> list[BaseRoute]:
    """The sandbox-only routes over ``store``; ``route(path, handlers)`` checks the key first.

    ``home`` is the sandbox home whose service this is (``None``: not a service), and
    ``inference_secrets`` each account's (user id's) inference secret; ``bill_factor`` the
    hours billed per real hour.
    """
    started = iso(now_ms())

    async def challenge(request: Request) -> Response:
        nonce = request.query_params.get("nonce", "")
        try:
            if not _NONCE.fullmatch(nonce):
                raise Problem(400, "nonce must be 16 to 128 lowercase hex digits.")
            secret = challenge_secret(Path(home)) if home is not None else None
            server = request.scope.get("server")
            if secret is None or not server:
                raise Problem(404, "This sandbox is not the service of a sandbox home.")
        except Problem as problem:
            return problem.spec_response(request.url.path)
        return json_response({"proof": challenge_proof(secret, nonce, os.getpid(), int(server[1]))})

    async def service(request: Request) -> Response:
        return json_response({"pid": os.getpid(), "startedAt": started})

    async def status(request: Request) -> Response:
        user, now = request.state.user, now_ms()
        records = store.instances(user)
        counts: dict[str, int] = {}
        for record in records:
            name = status_of(record, now).name
            counts[name] = counts.get(name, 0) + 1
        return json_response({
            "pid": os.getpid(), "startedAt": started, "instances": counts,
            "volumes": len(store.volumes(user)),
            "spend": round(sum(spend(record, now, bill_factor) for record in records), 6),
        })

    async def inference(request: Request) -> Response:
        return json_response({"url": f"{str(request.base_url).rstrip('/')}/inference",
                      "secret": inference_secrets[request.state.user]})

    async def register_keys(request: Request) -> Response:
        keys = (await read_json_object(request)).get("keys")
        if not isinstance(keys, list) or not keys or not all(isinstance(k, str) for k in keys):
            raise Problem(400, "keys must be a non-empty list of OpenSSH public keys.")
        try:
            added = request.app.state.ssh.register(keys)
        except ValueError as error:
            raise Problem(400, str(error)) from None
        return json_response({"added": added})

    return [
        Route("/sandbox/challenge", challenge, methods=["GET"]),  # no key: it proves the server
        route("/sandbox/service", {"GET": service}),
        route("/sandbox/status", {"GET": status}),
        route("/sandbox/inference", {"GET": inference}),
        route("/sandbox/ssh-keys", {"POST": register_keys}),
    ]
