"""A hub's users as the gateway's people: made on first sight, kept in the state file.

    >>> person = hub_person(HubUser("ada", False, ("physics",)), HubBudgets(default=(10.0, "")))
    >>> person.name, person.budget, person.group, person.teacher, len(person.account)
    ('ada', 10.0, 'physics', False, 16)

:class:`Roster` stands where a keys file's :class:`~gpucloud_nb.gateway.keys.Keyring` stands
(the watcher, the teacher's routes and the class view read its ``people``), and its
:meth:`Roster.identify` is the gate's way of telling who sends a request. A hub user's account is
the first 16 hex digits of ``sha256("jupyterhub-user:" + name)``: the same person whatever token
their server has today (tokens change at every server start); no token is ever stored, only that
hash and the hub's name, admin flag and groups (table ``hub_people``). Hub admins, and members of
the teacher group, are teachers. At each start the people seen before are read back, so their
budgets, timers and idle deletes are watched before anyone sends a request, and whether or not
the hub answers. Their budgets are resolved again (file, runtime changes) at start and whenever
the hub is asked about them again (:mod:`gpucloud_nb.gateway.hub_budgets`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace

from starlette.requests import Request

from gpucloud_nb.gateway.hub import HubAuth, HubUnreachable, HubUser, token_of
from gpucloud_nb.gateway.hub_budgets import HubBudgets
from gpucloud_nb.gateway.keys import Keyring, Person
from gpucloud_nb.gateway.store import Store
from gpucloud_nb.gateway.teacher_routes import user_budget_changes
from gpucloud_nb.sandbox.http import Problem, now_ms

__all__ = ["CREATE_REFUSED", "UNKNOWN_TOKEN", "Roster", "hub_person"]

UNKNOWN_TOKEN = "The API key is invalid."
CREATE_REFUSED = ("The hub cannot be reached to confirm who you are, so nothing new is created "
                  "until it answers; your running instances keep their budget and timers.")
UNREACHABLE = "The hub cannot be reached to say whose token this is; try again in a minute."
_RETRY = {"Retry-After": "30"}
_CREATES = ("/gpu-cloud/instances", "/gpu-cloud/volumes")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS hub_people (account TEXT PRIMARY KEY, name TEXT NOT NULL UNIQUE,
    admin INTEGER NOT NULL, groups TEXT NOT NULL, seen_ms INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS hub_group_budgets (name TEXT PRIMARY KEY, budget REAL,
    period TEXT NOT NULL, ms INTEGER NOT NULL);
"""


def _key_hash(name: str) -> str:
    return hashlib.sha256(f"jupyterhub-user:{name}".encode()).hexdigest()


def hub_person(user: HubUser, budgets: HubBudgets,
               user_changes: dict[str, tuple[float | None, str]] | None = None) -> Person:
    """The gateway's person for hub ``user``, with their budget and group."""
    key_hash = _key_hash(user.name)
    teacher = user.admin or bool(budgets.teacher_group and budgets.teacher_group in user.groups)
    group = budgets.group_of(user.groups)
    if teacher:
        return Person(key_hash, user.name, None, "", True, group)
    changes = user_changes or {}
    account = key_hash[:16]
    if account in changes:
        budget, period = changes[account]
    else:
        budget, period, group = budgets.resolve(user.name, user.groups)
    return Person(key_hash, user.name, budget, period, False, group)


class Roster(Keyring):
    """The hub users the gateway has seen; tells who a request's hub token belongs to."""

    def __init__(self, store: Store, hub: HubAuth, budgets: HubBudgets) -> None:
        self.store, self.hub, self.budgets = store, hub, budgets
        store.db.executescript(_SCHEMA)
        rows = store.db.execute("SELECT name, budget, period FROM hub_group_budgets").fetchall()
        budgets.group_changes = {str(r[0]): (r[1], str(r[2])) for r in rows}
        self.users: dict[str, HubUser] = {}
        for name, admin, groups in store.db.execute(
                "SELECT name, admin, groups FROM hub_people").fetchall():
            self.users[str(name)] = HubUser(str(name), bool(admin), tuple(json.loads(groups)))
        super().__init__(())
        self.refresh()

    def find(self, key: str | None) -> Person | None:
        """No key of a keys file opens a hub's gateway: always ``None``."""
        return None

    def refresh(self) -> None:
        """Resolve every known person's budget and group again (after a budget changed)."""
        changes = user_budget_changes(self.store)
        people = [hub_person(user, self.budgets, changes) for user in self.users.values()]
        people.sort(key=lambda p: (p.group == "", p.group, p.name))
        self.people = tuple(people)
        self.store.set_people(people)

    def person_for(self, user: HubUser) -> Person:
        """The person of hub ``user``, recorded (or updated) when the hub says something new."""
        if self.users.get(user.name) != replace(user, scopes=frozenset()):
            self.users[user.name] = replace(user, scopes=frozenset())
            with self.store.transaction() as db:
                db.execute("INSERT OR REPLACE INTO hub_people VALUES (?, ?, ?, ?, ?)",
                           (_key_hash(user.name)[:16], user.name, int(user.admin),
                            json.dumps(list(user.groups)), now_ms()))
            self.refresh()
        account = _key_hash(user.name)[:16]
        return next(p for p in self.people if p.account == account)

    def set_group_budget(self, group: str, budget: tuple[float | None, str] | None) -> None:
        """Change (``None``: drop the change of) ``group``'s budget at runtime, for everyone."""
        with self.store.transaction() as db:
            if budget is None:
                db.execute("DELETE FROM hub_group_budgets WHERE name=?", (group,))
                self.budgets.group_changes.pop(group, None)
            else:
                db.execute("INSERT OR REPLACE INTO hub_group_budgets VALUES (?, ?, ?, ?)",
                           (group, budget[0], budget[1], now_ms()))
                self.budgets.group_changes[group] = budget
        self.refresh()

    def by_name(self, name: str) -> Person | None:
        """The person of hub user ``name``, if seen."""
        return self.by_account(_key_hash(name)[:16])

    async def identify(self, request: Request) -> Person:
        """The person whose hub token ``request`` carries; a :class:`Problem` otherwise.

        403 for a token the hub does not know (or one without access to this service); 503 with
        ``Retry-After`` when the hub cannot be reached, for a create and for a token never seen.
        """
        token = token_of(request.headers)
        if not token:
            raise Problem(403, UNKNOWN_TOKEN)
        create = request.method == "POST" and request.url.path in _CREATES
        try:
            user = await self.hub.user_for_token(token, fresh=create)
        except HubUnreachable:
            user = self.hub.last_known(token)
            if user is None:
                raise Problem(503, UNREACHABLE, headers=_RETRY) from None
            if create:
                raise Problem(503, CREATE_REFUSED, headers=_RETRY) from None
        if user is None or not user.may_use(self.hub.settings.service_name):
            raise Problem(403, UNKNOWN_TOKEN)
        return self.person_for(user)
