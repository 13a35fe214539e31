"""The teacher's view of a class sandbox: every student's use, stopping one student or the class.

    >>> teacher = GPUCloud(api_key=TEACHER_KEY, base_url="http://127.0.0.1:8765")  # doctest: +SKIP
    >>> [(row.name, row.spend) for row in teacher.class_view.accounts()]  # doctest: +SKIP
    [('Ada', 0.42), ('account 2', 0.0)]
    >>> teacher.class_view.stop_class()   # every student's instances  # doctest: +SKIP

Only a class sandbox served with a teacher's key (``GPUCLOUD_TEACHER_KEY``) answers, and only to that key (see
:mod:`gpucloud_nb.sandbox.teacher`); any other key, and the real cloud, get one sentence saying
so (:class:`~gpucloud_nb.errors.NotFoundError`).
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
NOT_TEACHER = ("This cloud has no teacher's view for this key: it needs a class sandbox served "
               "with a teacher's key (GPUCLOUD_TEACHER_KEY), and that key.")


@dataclass(frozen=True)
class AccountUse:
    """One student's account in the teacher's view; dollars, and ``None`` where there is none."""

    account: str
    name: str
    key: str
    instances: int
    per_hour: float
    spend: float
    budget: float | None
    left: float | None
    idle_minutes: float | None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> AccountUse:
        """A row of ``GET /sandbox/class``."""

        def number(name: str) -> float | None:
            value = data.get(name)
            return None if value is None else float(value)

        return cls(account=str(data["account"]), name=str(data["name"]), key=str(data["key"]),
                   instances=int(data["instances"]), per_hour=float(data["perHour"]),
                   spend=float(data["spend"]), budget=number("budget"), left=number("left"),
                   idle_minutes=number("idleMinutes"))


class ClassView:
    """The teacher's requests; ``send(method, path, body)`` returns the decoded JSON."""

    def __init__(self, send: Send) -> None:
        self._send = send

    def _ask(self, method: str, path: str) -> Any:
        try:
            return self._send(method, path, None)
        except NotFoundError as error:
            if "There is no endpoint" in str(error):
                raise NotFoundError(NOT_TEACHER, status_code=404, path=error.path,
                                    body=error.body, request=error.request) from None
            raise

    def accounts(self) -> list[AccountUse]:
        """Every student's account, in the order of the keys file."""
        answer = self._ask("GET", "/sandbox/class")
        return [AccountUse.from_json(row) for row in answer.get("accounts", [])]

    def stop_student(self, account: str) -> list[str]:
        """Delete every instance of ``account`` (an :attr:`AccountUse.account`); the ids."""
        if not isinstance(account, str) or not account.strip() or "/" in account:
            raise InvalidInputError(f"{account!r} is not an account of this class.")
        return list(self._ask("DELETE", f"/sandbox/class/accounts/{account}/instances")["deleted"])

    def stop_class(self) -> list[str]:
        """Delete every instance of every student; the ids."""
        return list(self._ask("DELETE", "/sandbox/class/instances")["deleted"])

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
