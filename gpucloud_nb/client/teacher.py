"""The teacher's view of a class: every student's use, their budgets, stopping one or the class.

    >>> teacher = GPUCloud(api_key=TEACHER_KEY, base_url="http://127.0.0.1:8790")  # doctest: +SKIP
    >>> [(row.name, row.spend) for row in teacher.class_view.accounts()]  # doctest: +SKIP
    [('Ada', 0.42), ('Alan', 0.0)]
    >>> teacher.class_view.stop_class()   # every student's instances  # doctest: +SKIP

A class gateway (``gpucloud-nb gateway --keys FILE``, in front of the real cloud or the
sandbox; see :mod:`gpucloud_nb.gateway.gateway_routes`) answers ``/gateway/class`` to a teacher
key of its keys file, and keeps budget changes, the audit and the CSV export. ``idle_minutes``
is how long the idlest of the student's instances watched for idle has been idle (``None`` when
none is watched).
Any other key, and a cloud that is not a gateway, get one sentence saying so
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
NOT_TEACHER = ("This cloud has no teacher's view for this key: it needs a class gateway "
               "(gpucloud-nb gateway --keys FILE) and a teacher key of its keys file.")
_CLASS = "/gateway/class"


@dataclass(frozen=True)
class AccountUse:
    """One student's account in the teacher's view; dollars, and ``None`` where there is none."""

    account: str
    name: str
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
        """A row of ``GET /gateway/class``."""

        def number(name: str) -> float | None:
            value = data.get(name)
            return None if value is None else float(value)

        return cls(account=str(data["account"]), name=str(data["name"]),
                   instances=int(data["instances"]),
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

    def _ask(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        try:
            return self._send(method, path, body)
        except NotFoundError as error:
            if "There is no endpoint" in str(error):
                raise NotFoundError(NOT_TEACHER, status_code=404, path=error.path,
                                    body=error.body, request=error.request) from None
            raise

    def accounts(self) -> list[AccountUse]:
        """Every student's account, in the order of the keys file."""
        return [AccountUse.from_json(row) for row in self._ask("GET", _CLASS).get("accounts", [])]

    @staticmethod
    def _account(account: str) -> str:
        if not isinstance(account, str) or not account.strip() or "/" in account \
                or "?" in account or "#" in account:
            raise InvalidInputError(f"{account!r} is not an account of this class.")
        return account

    def stop_student(self, account: str) -> list[str]:
        """Delete every instance of ``account`` (an :attr:`AccountUse.account`); the ids."""
        account = self._account(account)
        return list(self._ask("DELETE", f"{_CLASS}/accounts/{account}/instances")["deleted"])

    def stop_class(self) -> list[str]:
        """Delete every instance of every student; the ids."""
        return list(self._ask("DELETE", f"{_CLASS}/instances")["deleted"])

    def set_budget(self, account: str, budget: float | str | None) -> AccountUse:
        """Change ``account``'s budget now: dollars, ``None`` for none, or ``"20/day"``,
        ``"20/week"``; the student's new row. Kept by the gateway over restarts."""
        account = self._account(account)
        if isinstance(budget, bool) or not isinstance(budget, int | float | str | None):
            raise InvalidInputError(f"{budget!r} is not a budget: give dollars, None, or "
                                    "'20/day'.")
        row = self._ask("PUT", f"{_CLASS}/accounts/{account}/budget", {"budget": budget})
        return AccountUse.from_json(row)

    def audit(self) -> list[dict[str, Any]]:
        """Who created, deleted or was refused what, when and why, oldest first (a gateway's)."""
        return list(self._ask("GET", "/gateway/audit").get("entries", []))

    def export_csv(self) -> str:
        """The class as CSV text, as the gateway writes it (``GET /gateway/class.csv``)."""
        if self._fetch is None:
            raise InvalidInputError("This client cannot read text answers; use csv().")
        try:
            return self._fetch(f"{_CLASS}.csv").decode("utf-8")
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
