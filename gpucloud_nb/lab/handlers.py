"""The ``/gpucloud/`` REST routes of the server extension, behind Jupyter's own auth and XSRF.

=================================  ========================================================
``GET /gpucloud/instances``        the poller's snapshot: instances with spend, totals, endpoints
``GET /gpucloud/instances/ID``     what deleting ID loses (``{"fate": "..."}``)
``DELETE /gpucloud/instances/ID``  delete ID in the cloud (204)
``POST /gpucloud/instances/ID/kernel``  install ID's kernelspec: ``{"name", "displayName"}``
``POST /gpucloud/instances/ID/keep`` start ID's idle clock again (204; 404 without a limit)
``POST /gpucloud/endpoints/ID/start``  start the stopped endpoint ID (204)
``POST /gpucloud/endpoints/ID/stop``   stop the endpoint ID (204)
``DELETE /gpucloud/endpoints/ID``  delete the endpoint ID (204)
``POST /gpucloud/refresh``         poll soon (a notebook cell just ran)
``PUT /gpucloud/settings``         the poller's intervals: ``{"busyInterval", "idleInterval"}``
``GET /gpucloud/info``             ``{"sandbox", "url", "cap"}``
=================================  ========================================================

Without the token (or a login cookie) every route answers 403; a DELETE, POST or PUT made with
the cookie must carry the XSRF token, as every Jupyter API call does. Reads change nothing: the
intervals, shared by every tab, change only through the PUT (a tab sends its settings when they
load or change). No answer holds a key or secret.

    $ curl -H "Authorization: token $TOKEN" http://127.0.0.1:8888/gpucloud/instances
"""

from __future__ import annotations

import json
import math
from typing import Any

import tornado.web
from jupyter_server.base.handlers import APIHandler

from gpucloud_nb.errors import BadRequestError, GPUCloudError, InvalidInputError, NotFoundError
from gpucloud_nb.lab.endpoints import Action
from gpucloud_nb.lab.poller import Poller

__all__ = ["handlers"]

_ID = r"(?P<instance_id>[^/?#]+)"
_ENDPOINT = r"(?P<endpoint_id>[^/?#]+)"


class _Handler(APIHandler):
    def initialize(self, poller: Poller) -> None:
        self.poller = poller

    def _answer(self, data: Any, status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(data))



class InstancesHandler(_Handler):
    @tornado.web.authenticated
    async def get(self) -> None:
        self._answer(await self.poller.snapshot())


class _BadSettings(ValueError):
    pass


def _seconds(body: dict[str, Any], name: str) -> float | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _BadSettings(f"{name} must be a number of seconds.")
    return float(value)


class SettingsHandler(_Handler):
    @tornado.web.authenticated
    def put(self) -> None:
        try:
            body = json.loads(self.request.body or b"{}")
            if not isinstance(body, dict):
                raise _BadSettings("The settings must be a JSON object.")
            fast, slow = _seconds(body, "busyInterval"), _seconds(body, "idleInterval")
        except ValueError as error:  # not JSON, or not numbers of seconds
            message = str(error) if isinstance(error, _BadSettings) else "The settings are not JSON."
            self._answer({"message": message}, 400)
            return
        self.poller.set_intervals(fast, slow)
        self._answer({"busyInterval": self.poller.fast, "idleInterval": self.poller.slow})


class InstanceHandler(_Handler):
    @tornado.web.authenticated
    async def get(self, instance_id: str) -> None:
        try:
            self._answer({"fate": await self.poller.fate(instance_id)})
        except NotFoundError as error:
            self._answer({"message": self.poller.scrub(str(error))}, 404)
        except GPUCloudError as error:
            self._answer({"message": self.poller.scrub(str(error))}, 502)

    @tornado.web.authenticated
    async def delete(self, instance_id: str) -> None:
        try:
            await self.poller.delete(instance_id)
        except NotFoundError as error:
            self._answer({"message": self.poller.scrub(str(error))}, 404)
        except GPUCloudError as error:
            self._answer({"message": self.poller.scrub(str(error))}, 502)
        else:
            self.set_status(204)
            self.finish()


class KernelHandler(_Handler):
    @tornado.web.authenticated
    async def post(self, instance_id: str) -> None:
        try:
            self._answer(await self.poller.install_kernel(instance_id))
        except NotFoundError as error:
            self._answer({"message": self.poller.scrub(str(error))}, 404)
        except InvalidInputError as error:
            self._answer({"message": self.poller.scrub(str(error))}, 400)
        except GPUCloudError as error:
            self._answer({"message": self.poller.scrub(str(error))}, 502)


class KeepHandler(_Handler):
    @tornado.web.authenticated
    async def post(self, instance_id: str) -> None:
        try:
            await self.poller.keep(instance_id)
        except (NotFoundError, InvalidInputError) as error:
            self._answer({"message": self.poller.scrub(str(error))}, 404)
        except GPUCloudError as error:
            self._answer({"message": self.poller.scrub(str(error))}, 502)
        else:
            self.set_status(204)
            self.finish()


class EndpointHandler(_Handler):
    """Start, stop or delete an endpoint (an inference instance): 204, or one sentence with 404
    (unknown), 400 (refused by the cloud, such as a start of a deleted one) or 502."""

    async def _act(self, endpoint_id: str, action: Action) -> None:
        try:
            await self.poller.endpoint_action(endpoint_id, action)
        except NotFoundError as error:
            self._answer({"message": self.poller.scrub(str(error))}, 404)
        except (BadRequestError, InvalidInputError) as error:
            self._answer({"message": self.poller.scrub(str(error))}, 400)
        except GPUCloudError as error:
            self._answer({"message": self.poller.scrub(str(error))}, 502)
        else:
            self.set_status(204)
            self.finish()

    @tornado.web.authenticated
    async def post(self, endpoint_id: str, action: str | None = None) -> None:
        if action is None:
            raise tornado.web.HTTPError(405)
        await self._act(endpoint_id, "start" if action == "start" else "stop")

    @tornado.web.authenticated
    async def delete(self, endpoint_id: str, action: str | None = None) -> None:
        if action is not None:
            raise tornado.web.HTTPError(405)
        await self._act(endpoint_id, "delete")


class RefreshHandler(_Handler):
    @tornado.web.authenticated
    def post(self) -> None:
        self.poller.nudge()
        self.set_status(204)
        self.finish()


class InfoHandler(_Handler):
    @tornado.web.authenticated
    async def get(self) -> None:
        self._answer(await self.poller.info())


def handlers(poller: Poller) -> list[tuple[str, type[APIHandler], dict[str, Any]]]:
    """The routes, relative to the server's base URL, each bound to ``poller``."""
    bound = {"poller": poller}
    return [
        ("/gpucloud/instances", InstancesHandler, bound),
        (f"/gpucloud/instances/{_ID}", InstanceHandler, bound),
        (f"/gpucloud/instances/{_ID}/kernel", KernelHandler, bound),
        (f"/gpucloud/instances/{_ID}/keep", KeepHandler, bound),
        (f"/gpucloud/endpoints/{_ENDPOINT}", EndpointHandler, bound),
        (f"/gpucloud/endpoints/{_ENDPOINT}/(?P<action>start|stop)", EndpointHandler, bound),
        ("/gpucloud/refresh", RefreshHandler, bound),
        ("/gpucloud/settings", SettingsHandler, bound),
        ("/gpucloud/info", InfoHandler, bound),
    ]
