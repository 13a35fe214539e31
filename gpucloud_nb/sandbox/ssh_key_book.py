"""The sandbox's SSH-key book (the appendix's ``/gpu-cloud/ssh-keys``), kept in its store.

    >>> book = KeyBook(Store())  # doctest: +SKIP
    >>> key = book.add("u1", {"name": "laptop", "publicKey": line}, "2026-01-01")  # doctest: +SKIP
    >>> book.make_default("u1", key["_id"], "2026-01-02")["isDefault"]  # doctest: +SKIP
    True

Choices where the appendix is silent: a user's first key is their default; a key already in the
book (same type and base64) is a 400; ``name`` is 1 to 255 characters; ids are 24 hex digits.
Each user's book is one document of the sandbox's store (``kind`` ``ssh-keys``), written before
the answer, so it survives a restart of the sandbox as instances do. A GPU instance create that
names ``sshKeyId`` gets that key of the book (:meth:`KeyBook.booked_key`); an id not in the book
is a 400.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from gpucloud_nb.inference_rules import public_key_problem
from gpucloud_nb.sandbox.http import Handler, Problem, json_response, now_ms, read_json_object
from gpucloud_nb.sandbox.store import Store

__all__ = ["KIND", "KeyBook", "iso", "key_book_routes"]

KIND = "ssh-keys"
"""The store's document kind of one user's book."""


def iso(ms: int) -> str:
    """Unix ms as the appendix's ISO 8601 text.

        >>> iso(0)
        '1970-01-01T00:00:00.000Z'
    """
    from datetime import datetime, timezone

    return datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat(timespec="milliseconds") \
        .replace("+00:00", "Z")


class KeyBook:
    """Every user's SSH keys, read from ``store`` once and written to it at each change."""

    def __init__(self, store: Store | None = None) -> None:
        self.store = store
        self.keys: dict[str, list[dict[str, Any]]] = {}
        for user, _, doc in store.documents(KIND) if store is not None else []:
            self.keys[user] = list(doc.get("keys", []))

    def _save(self, user: str) -> None:
        if self.store is not None:
            self.store.put_document(KIND, user, user, {"keys": self.keys.get(user, [])})

    def list(self, user: str) -> list[dict[str, Any]]:
        """``user``'s keys, oldest first."""
        return self.keys.get(user, [])

    def add(self, user: str, body: Mapping[str, Any], now: str) -> dict[str, Any]:
        """Add the key of a ``POST`` body; the stored key, or a 400 :class:`Problem`."""
        name, public_key = body.get("name"), body.get("publicKey")
        if not isinstance(name, str) or not name.strip() or len(name) > 255:
            raise Problem(400, "name must be 1 to 255 characters.")
        problem = public_key_problem(public_key) if isinstance(public_key, str) \
            else "publicKey is required: one OpenSSH public key line."
        if problem:
            raise Problem(400, problem)
        assert isinstance(public_key, str)
        book = self.keys.setdefault(user, [])
        if any(k["publicKey"].split()[:2] == public_key.split()[:2] for k in book):
            raise Problem(400, "That public key is already in your SSH-key book.")
        key = {"_id": secrets.token_hex(12), "user": user, "name": name,
               "publicKey": public_key.strip(), "isDefault": not book,
               "createdAt": now, "updatedAt": now}
        book.append(key)
        self._save(user)
        return key

    def key(self, user: str, id_: str) -> dict[str, Any]:
        """``user``'s key ``id_``, or a 404 :class:`Problem`."""
        found = next((k for k in self.keys.get(user, []) if k["_id"] == id_), None)
        if found is None:
            raise Problem(404, f"SSH key {id_} not found.")
        return found

    def booked_key(self, user: str, id_: str) -> tuple[dict[str, str], str]:
        """A GPU instance create's ``sshKeyId``: its ``sshKey`` object and the key text, or 400."""
        found = next((k for k in self.keys.get(user, []) if k["_id"] == id_), None)
        if found is None:
            raise Problem(400, f"SSH key {id_} is not in your SSH-key book (sshKeyId).")
        return {"_id": found["_id"], "name": found["name"]}, found["publicKey"]

    def make_default(self, user: str, id_: str, now: str) -> dict[str, Any]:
        """Make ``id_`` ``user``'s default key; the key."""
        chosen = self.key(user, id_)
        for key in self.keys[user]:
            if key["isDefault"] != (key is chosen):
                key["isDefault"] = key is chosen
                key["updatedAt"] = now
        self._save(user)
        return chosen

    def delete(self, user: str, id_: str) -> None:
        """Remove ``user``'s key ``id_`` (404 if there is none)."""
        found = self.key(user, id_)
        self.keys[user].remove(found)
        self._save(user)


def key_book_routes(route: Callable[[str, Mapping[str, Handler]], Route],
                    book: KeyBook) -> list[BaseRoute]:
    """The appendix's SSH-key routes behind the sandbox's key check."""

    async def list_keys(request: Request) -> Response:
        return json_response(book.list(request.state.user))

    async def add_key(request: Request) -> Response:
        body = await read_json_object(request)
        return json_response(book.add(request.state.user, body, iso(now_ms())), status=201)

    async def make_default(request: Request) -> Response:
        return json_response(book.make_default(request.state.user, request.path_params["id"],
                                               iso(now_ms())))

    async def delete_key(request: Request) -> Response:
        book.delete(request.state.user, request.path_params["id"])
        return Response(status_code=204)

    return [
        route("/gpu-cloud/ssh-keys", {"GET": list_keys, "POST": add_key}),
        route("/gpu-cloud/ssh-keys/{id}/makedefault", {"PATCH": make_default}),
        route("/gpu-cloud/ssh-keys/{id}", {"DELETE": delete_key}),
    ]
