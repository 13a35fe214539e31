"""The gateway's ASGI app: the spec's routes and ``/gateway/...``, its watcher in the lifespan.

    >>> app = create_app(config)  # doctest: +SKIP

Behind :class:`~gpucloud_nb.sandbox.guards.Guard`: a ``Host`` that does not name the bound
address is a 421 (DNS rebinding) and any body over 1 MB a 413 (64 MB, with the OpenAI error body,
under ``/gateway/endpoints/``, where images and audio go), read no further. An unknown path is
the spec's 404 body, a wrong method its 405. Every answer carries a ``Server-Timing`` header
(:mod:`gpucloud_nb.gateway.timing`): the app's time and the upstream's. A JupyterHub's gateway
(``config.hub``) tells people by their hub tokens (:mod:`gpucloud_nb.gateway.hub_people`),
answers under the hub's service prefix as well as without it, and accepts any ``Host`` (the
hub's proxy passes on the public name; every request carries a token, no cookie a rebinding
page could ride on).
``app.state.store`` is the :class:`~gpucloud_nb.gateway.store.Store`; whoever serves the app
closes it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from gpucloud_nb.gateway.budgets import budget_routes
from gpucloud_nb.gateway.cloud_routes import Gate, cloud_routes
from gpucloud_nb.gateway.config import GatewayConfig
from gpucloud_nb.gateway.endpoint_routes import ENDPOINT_BODY_BYTES, ENDPOINTS, endpoint_routes
from gpucloud_nb.gateway.gateway_routes import gateway_routes
from gpucloud_nb.gateway.gpu_reader import GPUReader
from gpucloud_nb.gateway.hub import strip_prefix
from gpucloud_nb.gateway.hub_routes import hub_roster, hub_routes
from gpucloud_nb.gateway.idle import IdleWatch
from gpucloud_nb.gateway.idle_routes import idle_routes
from gpucloud_nb.gateway.key_book_routes import key_book_routes
from gpucloud_nb.gateway.keys import Keyring
from gpucloud_nb.gateway.meter import Meter
from gpucloud_nb.gateway.ssh_key import gateway_key, public_line
from gpucloud_nb.gateway.store import STATE_FILE, Store
from gpucloud_nb.gateway.teacher_routes import effective_people, teacher_routes
from gpucloud_nb.gateway.timers import timer_routes
from gpucloud_nb.gateway.timing import ServerTiming
from gpucloud_nb.gateway.upstream import Upstream
from gpucloud_nb.media.limits import MB
from gpucloud_nb.sandbox.guards import Guard, allowed_hosts
from gpucloud_nb.sandbox.http import MAX_BODY_BYTES, Problem, spec_error

__all__ = ["create_app"]


def _guard_error(status: int, message: str, path: str) -> Response:
    """The guard's refusal: OpenAI's error body under an endpoint's path, the spec's elsewhere."""
    if path.startswith(ENDPOINTS + "/"):
        code = {413: "request_too_large", 421: "misdirected_request"}.get(status)
        return Problem(status, message, code=code).openai_response()
    return spec_error(status, message, path)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    path = request.url.path
    if exc.status_code == 404:
        message = f"There is no endpoint {request.method} {path}."
    elif exc.status_code == 405:
        message = f"Method {request.method} is not allowed on {path}."
    else:
        message = str(exc.detail)
    return spec_error(exc.status_code, message, path)


async def _server_error(request: Request, exc: Exception) -> Response:
    return spec_error(500, "The gateway failed to handle this request.", request.url.path)


def create_app(config: GatewayConfig, changed: Callable[[], None] | None = None) -> Any:
    """The gateway for ``config``, guarded; its ``state.store`` is open until its server closes it;
    ``changed()`` after each delete the gateway itself makes (see :mod:`gpucloud_nb.gateway.meter`)."""
    path = ":memory:" if config.home is None else config.home / STATE_FILE
    store = Store(path)
    upstream = Upstream(config.upstream_url, config.upstream_key)
    roster = None if config.hub is None else hub_roster(config, store)
    if roster is None:
        people = effective_people(store, config.people)
        store.set_people(people)
    keyring = Keyring(people) if roster is None else roster
    key = gateway_key(config.home)
    meter = Meter(store, keyring, upstream, config.poll)
    if changed is not None:
        meter.changed = changed
    gate = Gate(config, store, upstream, meter, public_key=public_line(key))
    reader = GPUReader(key)
    meter.idle = IdleWatch(store, reader, meter.delete)
    extra = [] if roster is None else hub_routes(gate, roster)
    if roster is not None:
        gate.identify = roster.identify

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        task = asyncio.create_task(gate.meter.run())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            reader.close()
            await upstream.aclose()
            if roster is not None:
                await roster.hub.aclose()

    app = Starlette(routes=extra + cloud_routes(gate) + endpoint_routes(gate) + key_book_routes(gate)
                    + gateway_routes(gate)
                    + timer_routes(gate)
                    + budget_routes(gate) + idle_routes(gate, meter.idle),
                    exception_handlers={HTTPException: _http_error, Exception: _server_error},
                    lifespan=lifespan)
    app.router.redirect_slashes = False
    app.state.store = store
    app.state.gate = gate
    app.router.routes.extend(teacher_routes(gate))
    if config.personal and config.home is not None:
        from gpucloud_nb.gateway.personal_routes import personal_routes

        app.router.routes.extend(personal_routes(config.home))
    guarded = Guard(app, hosts=allowed_hosts(config.host) if roster is None else None,
                    limits=[(ENDPOINTS + "/", ENDPOINT_BODY_BYTES,
                             f"The request body is too large (over {ENDPOINT_BODY_BYTES // MB} "
                             f"MB); the limit is {ENDPOINT_BODY_BYTES // MB} MB."),
                            ("/", MAX_BODY_BYTES, "The request body is larger than 1 MB.")],
                    error=_guard_error)
    return ServerTiming(guarded if config.hub is None else strip_prefix(guarded, config.hub.prefix))

