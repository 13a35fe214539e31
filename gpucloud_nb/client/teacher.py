"""The teacher's view of a class: every student's use, their budgets, stopping one or the class.

    >>> teacher = GPUCloud(api_key=TEACHER_KEY, base_url="http://127.0.0.1:8790")  # doctest: +SKIP
    >>> [(row.name, row.spend) for row in teacher.class_view.accounts()]  # doctest: +SKIP
    [('Ada', 0.42), ('Alan', 0.0)]
    >>> teacher.class_view.stop_class()   # every student's instances  # doctest: +SKIP

One view for two servers. A class gateway (``gpucloud-nb gateway``, see
:mod:`gpucloud_nb.gateway.gateway_routes`) answers ``/gateway/class`` to a teacher key; a class
sandbox served with a teacher's key (``GPUCLOUD_TEACHER_KEY``) answers ``/sandbox/class`` (to
be removed). The view asks the gateway's path first and, when the server has no such endpoint,
the sandbox's, then keeps to the one that answered. Rows take the gateway's shape; ``key`` (a
masked key) comes only from the sandbox, ``period`` and ``unconfirmed_deletes`` only from the
gateway. ``idle_minutes`` is, from a gateway, how long the idlest of the student's instances
watched for idle has been idle (``None`` when none is watched), and from a class sandbox the
minutes since the student last called it. Budget changes, the audit and the server's CSV exist
only on a gateway. Any other key, and the real cloud, get one sentence saying so
(:class:`~gpucloud_nb.errors.NotFoundError`).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING, Any

from gpucloud_nb.errors import InvalidInputError, NotFoundError

if TYPE_CHECKING:
    import pandas

__all__ = ["AccountUse", "ClassView"]

Send = Callable[[str, str, "dict[str, Any] | None"], Any]
Fetch = Callable[[str], bytes]
NOT_TEACHER = ("This cloud has no teacher's view for this key: it needs a class gateway and a "
               "teacher key of its keys file (or a class sandbox served with a teacher's key, "
               "GPUCLOUD_TEACHER_KEY, and that key).")
NOT_GATEWAY = "Only a class gateway keeps budgets changed at runtime, an audit and a CSV export."
_GATEWAY, _SANDBOX = "/gateway/class", "/sandbox/class"


@dataclass(frozen=True)
class AccountUse:
    """One student's account in the teacher's view; dollars, and ``None`` where there is none."""

    account: str
    name: str
    key: str  # masked; "" from a gateway
    instances: int
    per_hour: float
    spend: float
    budget: float | None
    left: float | None
    idle_minutes: float | None  # None when nothing of the student's is watched
    period: str = ""  # "", "day" or "week" (a gateway's budgets that start again)
    unconfirmed_deletes: int = 0  # deletes the cloud took and has not done (a gateway's)
    group: str = ""  # the JupyterHub group a hub's gateway files the student under

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> AccountUse:
        """A row of ``GET /gateway/class`` or of ``GET /sandbox/class``."""

        def number(name: str) -> float | None:
            value = data.get(name)
            return None if value is None else float(value)

        return cls(account=str(data["account"]), name=str(data["name"]),
                   key=str(data.get("key") or ""), instances=int(data["instances"]),
                   per_hour=float(data["perHour"]), spend=float(data["spend"]),
                   budget=number("budget"), left=number("left"),
                   idle_minutes=number("idleMinutes"), period=str(data.get("period") or ""),
                   unconfirmed_deletes=int(data.get("unconfirmedDeletes") or 0),
                   group=str(data.get("group") or ""))


class ClassView:
    """The teacher's requests; ``send(method, path, body)`` returns the decoded JSON and
    ``fetch(path)`` the body of a ``GET`` as bytes."""

    def __init__(self, send: Send, fetch: Fetch | None = None) -> None:
        self._send = send
        self._fetch = fetch
        self._base: str | None = None  # the path that answered: a gateway's or a sandbox's

    def _ask(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        try:
            return self._send(method, path, body)
        except NotFoundError as error:
            if "There is no endpoint" in str(error):
                raise NotFoundError(NOT_TEACHER, status_code=404, path=error.path,
                                    body=error.body, request=error.request) from None
            raise

    def _class_path(self) -> str:
        if self._base is None:
            self.accounts()
        assert self._base is not None
        return self._base

    @property
    def on_gateway(self) -> bool:
        """True when the class is a gateway's (asks the server once if not known yet)."""
        return self._class_path() == _GATEWAY

    def accounts(self) -> list[AccountUse]:
        """Every student's account, in the order of the keys file."""
        for base in ((self._base,) if self._base else (_GATEWAY, _SANDBOX)):
            try:
                answer = self._ask("GET", base)
            except NotFoundError as error:
                if str(error) == NOT_TEACHER and base == _GATEWAY and self._base is None:
                    continue
                raise
            self._base = base
            return [AccountUse.from_json(row) for row in answer.get("accounts", [])]
        raise AssertionError("unreachable")  # the sandbox's path answers or raises

    @staticmethod
    def _account(account: str) -> str:
        if not isinstance(account, str) or not account.strip() or "/" in account \
                or "?" in account or "#" in account:
            raise InvalidInputError(f"{account!r} is not an account of this class.")
        return account

    def stop_student(self, account: str) -> list[str]:
        """Delete every instance of ``account`` (an :attr:`AccountUse.account`); the ids."""
        account = self._account(account)
        return list(self._ask("DELETE", f"{self._class_path()}/accounts/{account}/instances")[
            "deleted"])

    def stop_class(self) -> list[str]:
        """Delete every instance of every student; the ids."""
        return list(self._ask("DELETE", f"{self._class_path()}/instances")["deleted"])

    def _gateway_only(self) -> None:
        if not self.on_gateway:
            raise InvalidInputError(NOT_GATEWAY)

    def set_budget(self, account: str, budget: float | str | None) -> AccountUse:
        """Change ``account``'s budget now: dollars, ``None`` for none, or ``"20/day"``,
        ``"20/week"``; the student's new row. Kept by the gateway over restarts."""
        account = self._account(account)
        if isinstance(budget, bool) or not isinstance(budget, int | float | str | None):
            raise InvalidInputError(f"{budget!r} is not a budget: give dollars, None, or "
                                    "'20/day'.")
        self._gateway_only()
        row = self._ask("PUT", f"{_GATEWAY}/accounts/{account}/budget", {"budget": budget})
        return AccountUse.from_json(row)

    def audit(self) -> list[dict[str, Any]]:
        """Who created, deleted or was refused what, when and why, oldest first (a gateway's)."""
        self._gateway_only()
        return list(self._ask("GET", "/gateway/audit").get("entries", []))

    def export_csv(self) -> str:
        """The class as CSV text, as the gateway writes it (``GET /gateway/class.csv``)."""
        self._gateway_only()
        if self._fetch is None:
            raise InvalidInputError("This client cannot read text answers; use csv().")
        try:
            return self._fetch(f"{_GATEWAY}.csv").decode("utf-8")
        except NotFoundError as error:
            raise NotFoundError(NOT_TEACHER, status_code=404, path=error.path, body=error.body,
                                request=error.request) from None

    def csv(self, accounts: list[AccountUse] | None = None) -> str:
        """The view as CSV text, one row per account, with a header (dollars as plain numbers)."""
        rows = self.accounts() if accounts is None else accounts
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=[field.name for field in fields(AccountUse)],
                                lineterminator="\n")
        writer.writeheader()
        for row in rows:
            writer.writerow(asdict(row))
        return out.getvalue()

    def frame(self) -> pandas.DataFrame:
        """The view as a DataFrame, one row per account (pandas is imported when called)."""
        import pandas

        frame: pandas.DataFrame = pandas.DataFrame(
            [asdict(row) for row in self.accounts()],
            columns=[field.name for field in fields(AccountUse)])
        return frame
