"""A class gateway recognised: its money rules kept by it, and what a student's key has left.

    >>> cloud = GPUCloud()  # GPUCLOUD_BASE_URL: the gateway; the student's key  # doctest: +SKIP
    >>> cloud.gateway_status()  # doctest: +SKIP
    GatewayStatus(name='Ada', budget=20.0, spend=16.5, left=3.5, warning=True, ...)
    >>> cloud.gateway_status().sentence()  # doctest: +SKIP
    'You have spent $16.50 of your budget of $20.00 (83 %); $3.50 is left.'

A client talks to a gateway (``gpucloud-nb gateway``, see :mod:`gpucloud_nb.gateway`) exactly as
to the cloud. It recognises one the way it recognises the sandbox service: ``GET /gateway/me``
answers for its key (:func:`probe`); the real cloud and the sandbox answer 404. The answer is
cached for the client's life (``core.gateway``). Through a gateway, ``create(...,
delete_after=)``, ``create(..., budget=)`` and ``create(..., delete_when_idle=)`` are kept by the
gateway's timers, budgets and idle clocks
(:class:`~gpucloud_nb.client.autodelete.ServiceAutoDelete`,
:class:`~gpucloud_nb.client.budgets.ServiceBudgets` and
:class:`~gpucloud_nb.client.idle.ServiceIdleDelete` over ``/gateway/...``; the idle limit
travels in the create's body as ``deleteWhenIdle``, so the gateway can add its SSH key to the
VM's cloud-init), so they are enforced with no kernel running; no thread of this process watches
them. Runs, copies and forwards this client opens are reported to the gateway while open
(:mod:`gpucloud_nb.client.use_report`).

Choices where the issue is silent:

- The probe is made only where it matters: at a create with ``delete_after``, ``budget`` or
  ``delete_when_idle``
  (before the POST: a failed probe launches nothing) and by :meth:`GPUCloud.gateway_status`;
  never when the client talks to the sandbox, and never when the client is built.
- An answer other than 404 (or 400/405) to the probe is raised as it is (the key refused, the
  cloud unreachable): whether money rules are kept must not be guessed.
- The warning sentence is shown from 80 % spent, the spent sentence once the gateway has
  deleted for the budget; times are shown in UTC as ``HH:MM``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gpucloud_nb.client._ops import Call, Op
from gpucloud_nb.display import format_price
from gpucloud_nb.errors import BadRequestError, NotFoundError, UnreadableResponseError
from gpucloud_nb.models import parse_datetime

__all__ = ["PROBE", "BudgetDelete", "GatewayStatus", "probe", "unkept"]

PROBE = "/gateway/me"


@dataclass(frozen=True)
class BudgetDelete:
    """An instance the gateway deleted when the key's budget was spent."""

    id: str
    name: str
    at: datetime | None


@dataclass(frozen=True)
class GatewayStatus:
    """A key's money as its gateway keeps it (``GET /gateway/me``); dollars, ``None`` without a
    budget. ``spent_at`` and ``deleted`` say when and what the gateway deleted at 100 %."""

    name: str
    budget: float | None
    spend: float
    left: float | None
    warning: bool
    period: str = ""
    per_hour: float = 0.0
    spent_at: datetime | None = None
    deleted: tuple[BudgetDelete, ...] = ()

    @classmethod
    def from_json(cls, data: Any) -> GatewayStatus:
        """The status from the gateway's JSON; anything else is one sentence."""
        try:
            budget, left = data.get("budget"), data.get("left")
            return cls(
                name=str(data["name"]), budget=None if budget is None else float(budget),
                spend=float(data["spend"]), left=None if left is None else float(left),
                warning=bool(data.get("warning")), period=str(data.get("period") or ""),
                per_hour=float(data.get("perHour") or 0.0),
                spent_at=parse_datetime(data.get("spentAt")),
                deleted=tuple(BudgetDelete(str(item["id"]), str(item.get("name", item["id"])),
                                           parse_datetime(item.get("at")))
                              for item in data.get("deleted") or ()))
        except (AttributeError, KeyError, TypeError, ValueError):
            raise UnreadableResponseError(
                f"The gateway's answer to GET {PROBE} was unreadable.") from None

    def sentence(self) -> str:
        """What a student should read now: the spent budget, the 80 % warning, or nothing.

            >>> GatewayStatus("Ada", 20.0, 17.0, 3.0, True).sentence()
            'You have spent $17.00 of your budget of $20.00 (85 %); $3.00 is left.'
        """
        if self.budget is None:
            return ""
        if self.spent_at is not None or self.deleted:
            when = f" at {self.spent_at:%H:%M} UTC" if self.spent_at is not None else ""
            names = ", ".join(item.name for item in self.deleted) or "nothing"
            return f"Your budget of {format_price(self.budget)} was spent{when}; deleted: {names}."
        if self.warning:
            share = round(100 * self.spend / self.budget) if self.budget else 100
            return (f"You have spent {format_price(self.spend)} of your budget of "
                    f"{format_price(self.budget)} ({share} %); "
                    f"{format_price(self.left or 0.0)} is left.")
        return ""


def unkept(options: str, *, at_create: bool = False) -> str:
    """One sentence for ``options`` (``delete_after``, ``budget``, ``delete_when_idle``) asked of a
    client of the cloud directly, where nothing watches money; ``at_create`` says nothing was
    launched.

        >>> unkept("delete_after")[:65]
        'Nothing watches money without a gateway, so nothing would keep de'
    """
    end = "; nothing was launched." if at_create else "."
    return (f"Nothing watches money without a gateway, so nothing would keep {options}: this "
            "client talks to the cloud directly (GPUCLOUD_GATEWAY=off, or a GPUCloud built on "
            "the cloud's own URL), while connect() goes through your personal gateway, which "
            f"keeps it{end}")


def probe(send: Any) -> Op[GatewayStatus | None]:
    """``GET /gateway/me`` through ``send`` (a core's ``send``): the key's status, or ``None``
    when the server is not a gateway (404, 400 or 405)."""
    try:
        data = yield from send(Call("GET", PROBE))
    except (NotFoundError, BadRequestError):
        return None
    return GatewayStatus.from_json(data)
