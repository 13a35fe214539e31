"""Who a JupyterHub token belongs to: the hub asked as HubAuth asks it, answers cached.

    >>> settings = HubSettings.from_env({"JUPYTERHUB_API_URL": "http://127.0.0.1:8081/hub/api",
    ...     "JUPYTERHUB_API_TOKEN": "s" * 32, "JUPYTERHUB_SERVICE_NAME": "gpucloud",
    ...     "JUPYTERHUB_SERVICE_PREFIX": "/services/gpucloud/",
    ...     "JUPYTERHUB_SERVICE_URL": "http://127.0.0.1:10101"})
    >>> settings.service_name, settings.bind
    ('gpucloud', ('127.0.0.1', 10101))
    >>> "s" * 32 in repr(settings)
    False

``gpucloud-nb gateway --jupyterhub`` runs as a JupyterHub managed service: the hub starts it
with ``JUPYTERHUB_API_URL``, ``JUPYTERHUB_API_TOKEN`` (the service's own token),
``JUPYTERHUB_SERVICE_NAME``, ``JUPYTERHUB_SERVICE_PREFIX`` and ``JUPYTERHUB_SERVICE_URL`` (where
to listen) in its environment. A person's key is the hub API token of their single-user server
(``JUPYTERHUB_API_TOKEN`` there), sent as ``x-api-key`` (``Authorization: token …`` works too).

**Asking the hub**, the conventional HubAuth way: ``GET {JUPYTERHUB_API_URL}/user`` with the
person's token (any token may identify its owner there); the answer's ``name``, ``admin``,
``groups`` and ``scopes`` are all the gateway needs. As HubAuth does, the token must carry
``access:services!service=<this service>`` (or ``access:services``): the hub grants it to users'
servers by the config in ``docs/jupyterhub.md``; a token without it is refused like an unknown
one. Choices (the issue leaves them open):

- an answer is cached for :data:`CACHE_SECONDS` (60) and a refusal (the hub's 401/403/404) for
  :data:`REFUSAL_SECONDS` (5), keyed by the token's sha256 and kept only in memory; the token
  itself is never stored or logged. A **create** asks the hub afresh every time: it spends money,
  so a token the hub has revoked, or a user it has removed, creates nothing more;
- a hub that does not answer (connection refused, timeout, 5xx) is :class:`HubUnreachable`; the
  last answer for a token is then still known (:meth:`HubAuth.last_known`, for
  :data:`STALE_SECONDS`, a day), so a person the gateway knows keeps reading and deleting what
  they own; **new creates are refused with 503** (and ``Retry-After``) in one sentence, as is any
  request of a token never seen, until the hub answers. 503 rather than 403: the token is not
  known to be wrong, and a client treats a 503 as worth retrying while a 403 says "check your
  key". Budgets, timers and idle deletes never ask the hub: the gateway's watcher keeps them for
  every person in its state file.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx

from gpucloud_nb._secrets import mask

__all__ = ["CACHE_SECONDS", "REFUSAL_SECONDS", "STALE_SECONDS", "HubAuth", "HubSettings",
           "HubUnreachable", "HubUser", "strip_prefix", "token_of"]

CACHE_SECONDS = 60.0
REFUSAL_SECONDS = 5.0
STALE_SECONDS = 86_400.0
_MAX_ENTRIES = 10_000
_TIMEOUT = httpx.Timeout(10.0, connect=3.0)


class HubUnreachable(Exception):
    """The hub did not answer (or answered 5xx); ``str()`` says what happened, without tokens."""


@dataclass(frozen=True)
class HubUser:
    """What the hub says of a token's owner."""

    name: str
    admin: bool
    groups: tuple[str, ...]
    scopes: frozenset[str] = frozenset()

    def may_use(self, service: str) -> bool:
        """True if the token may access ``service`` (``access:services[!service=NAME]``)."""
        return bool({"access:services", f"access:services!service={service}"} & self.scopes)


@dataclass(frozen=True)
class HubSettings:
    """The hub a gateway serves as a service of, from the environment the hub gives it."""

    api_url: str
    token: str = field(repr=False)
    service_name: str = "gpucloud"
    prefix: str = "/services/gpucloud/"
    service_url: str = ""

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> HubSettings:
        """Read ``JUPYTERHUB_*``; :class:`ValueError` with one sentence when one is missing."""
        missing = [name for name in ("JUPYTERHUB_API_URL", "JUPYTERHUB_API_TOKEN")
                   if not env.get(name)]
        if missing:
            raise ValueError(f"--jupyterhub needs {' and '.join(missing)} from the hub: run the "
                             "gateway as a service in c.JupyterHub.services (docs/jupyterhub.md)")
        name = env.get("JUPYTERHUB_SERVICE_NAME") or "gpucloud"
        prefix = env.get("JUPYTERHUB_SERVICE_PREFIX") or f"/services/{name}/"
        return cls(api_url=env["JUPYTERHUB_API_URL"].rstrip("/"),
                   token=env["JUPYTERHUB_API_TOKEN"], service_name=name,
                   prefix="/" + prefix.strip("/") + "/", service_url=env.get(
                       "JUPYTERHUB_SERVICE_URL", ""))

    @property
    def bind(self) -> tuple[str, int] | None:
        """``(host, port)`` of ``JUPYTERHUB_SERVICE_URL`` (where the hub expects us), or ``None``."""
        if not self.service_url:
            return None
        parts = urlsplit(self.service_url)
        if not parts.hostname:
            return None
        return parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)

    def __repr__(self) -> str:
        return (f"HubSettings(api_url={self.api_url!r}, token={mask(self.token)!r}, "
                f"service_name={self.service_name!r}, prefix={self.prefix!r})")


def token_of(headers: Mapping[str, str]) -> str:
    """The token a request carries: ``x-api-key``, else ``Authorization: token|Bearer …``.

        >>> token_of({"authorization": "token abc"}), token_of({"x-api-key": "k"})
        ('abc', 'k')
    """
    key = headers.get("x-api-key")
    if key:
        return key.strip()
    scheme, _, value = (headers.get("authorization") or "").strip().partition(" ")
    return value.strip() if scheme.lower() in ("token", "bearer") else ""


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "replace")).hexdigest()


class HubAuth:
    """Identify tokens with the hub at ``settings.api_url``; answers cached in memory."""

    def __init__(self, settings: HubSettings, *, cache_seconds: float = CACHE_SECONDS,
                 refusal_seconds: float = REFUSAL_SECONDS,
                 client: httpx.AsyncClient | None = None) -> None:
        self.settings = settings
        self.cache_seconds, self.refusal_seconds = cache_seconds, refusal_seconds
        self._client = client or httpx.AsyncClient(timeout=_TIMEOUT, trust_env=False)
        # sha256(token) -> (fresh until, monotonic; the answer or None for a refusal)
        self._cache: dict[str, tuple[float, HubUser | None]] = {}
        self.asked = 0  # requests sent to the hub (for tests of the cache)

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._client.aclose()

    def last_known(self, token: str) -> HubUser | None:
        """The last answer for ``token`` (even expired, up to a day old), or ``None``."""
        entry = self._cache.get(_hash(token))
        if entry is None or entry[1] is None:
            return None
        if time.monotonic() - entry[0] > STALE_SECONDS:
            return None
        return entry[1]

    async def user_for_token(self, token: str, *, fresh: bool = False) -> HubUser | None:
        """The owner of ``token``, ``None`` if the hub does not know it; :class:`HubUnreachable`.

        ``fresh=True`` asks the hub even when a cached answer is still fresh (a create does).
        """
        key = _hash(token)
        entry = self._cache.get(key)
        now = time.monotonic()
        if entry is not None and now < entry[0] and not (fresh and entry[1] is not None):
            return entry[1]
        user = await self._ask(token)
        if len(self._cache) >= _MAX_ENTRIES:
            self._prune(now)
        ttl = self.cache_seconds if user is not None else self.refusal_seconds
        self._cache[key] = (time.monotonic() + ttl, user)
        return user

    def _prune(self, now: float) -> None:
        for key, (fresh_until, user) in list(self._cache.items()):
            if fresh_until < now and (user is None or now - fresh_until > STALE_SECONDS):
                del self._cache[key]
        while len(self._cache) >= _MAX_ENTRIES:
            del self._cache[next(iter(self._cache))]

    async def _ask(self, token: str) -> HubUser | None:
        self.asked += 1
        url = f"{self.settings.api_url}/user"
        try:
            response = await self._client.get(url, headers={"Authorization": f"token {token}"})
        except httpx.HTTPError as error:
            raise HubUnreachable(f"the hub at {self.settings.api_url} did not answer "
                                 f"({type(error).__name__})") from None
        if response.status_code in (401, 403, 404):
            return None
        if response.status_code != 200:
            raise HubUnreachable(f"the hub at {self.settings.api_url} answered "
                                 f"{response.status_code}")
        try:
            return _user(response.json())
        except (ValueError, TypeError):
            raise HubUnreachable(f"the hub at {self.settings.api_url} sent an answer that is not "
                                 "a user") from None


def _user(data: Any) -> HubUser | None:
    if not isinstance(data, dict) or data.get("kind", "user") != "user":
        return None  # a service's token identifies a service, not a person
    name = data.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError("no name")
    groups = data.get("groups") or []
    scopes = data.get("scopes") or []
    return HubUser(name=name, admin=bool(data.get("admin")),
                   groups=tuple(str(g) for g in groups if isinstance(g, str)),
                   scopes=frozenset(str(s) for s in scopes if isinstance(s, str)))


def strip_prefix(app: Any, prefix: str) -> Any:
    """``app`` also answered under ``prefix`` (the hub's proxy keeps it in the path).

    Requests that come straight to the service's own URL without the prefix are answered too.
    The prefix a request came under becomes its ``root_path``, so the addresses the gateway
    writes into answers (an endpoint's ``address``) keep it.
    """
    bare = prefix.rstrip("/")

    async def stripped(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket"):
            path = scope.get("path", "")
            if path == bare or path.startswith(bare + "/"):
                raw = scope.get("raw_path") or path.encode()
                if raw.startswith(bare.encode()):
                    raw = raw[len(bare):] or b"/"
                scope = {**scope, "path": path[len(bare):] or "/", "raw_path": raw,
                         "root_path": scope.get("root_path", "") + bare}
        await app(scope, receive, send)

    return stripped
