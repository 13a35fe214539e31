"""A personal gateway's one route of its own: the challenge that proves it is its home's.

    $ curl "$GATEWAY/gateway/challenge?nonce=00112233445566778899aabbccddeeff"
    {"proof":"5f0c…"}

``GET /gateway/challenge?nonce=N`` takes no key and answers ``{"proof"}``: the HMAC-SHA256,
keyed by the home's challenge secret, of the nonce, the gateway's pid and the port the request
came in on (:func:`gpucloud_nb.sandbox.service.challenge_proof`, as the sandbox service proves
itself). ``connect()`` asks it before sending the local key (:mod:`gpucloud_nb.gateway.personal`).
A nonce that is not 16 to 128 lowercase hex digits is a 400; a gateway that is not a home's
personal gateway has no such route (404).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from gpucloud_nb.sandbox.http import Problem, json_response
from gpucloud_nb.sandbox.service import challenge_proof, challenge_secret

__all__ = ["personal_routes"]

_NONCE = re.compile(r"[0-9a-f]{16,128}")


def personal_routes(home: Path) -> list[BaseRoute]:
    """The challenge route of the personal gateway of ``home``."""

    async def challenge(request: Request) -> Response:
        nonce = request.query_params.get("nonce", "")
        try:
            if not _NONCE.fullmatch(nonce):
                raise Problem(400, "nonce must be 16 to 128 lowercase hex digits.")
            secret = challenge_secret(home)
            server = request.scope.get("server")
            if secret is None or not server:
                raise Problem(404, "This gateway has no challenge secret.")
        except Problem as problem:
            return problem.spec_response(request.url.path)
        return json_response({"proof": challenge_proof(secret, nonce, os.getpid(),
                                                       int(server[1]))})

    return [Route("/gateway/challenge", challenge, methods=["GET"])]
