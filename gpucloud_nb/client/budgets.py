"""Spend budgets: an instance is deleted once it has cost its budget, with a warning at 80 %.

    >>> cloud.budgets.set(instance.id, 5)          # dollars  # doctest: +SKIP
    >>> cloud.budgets.states()[instance.id].warning  # doctest: +SKIP
    False

Who watches, plainly (issue #36: every money rule in one place, never a thread of this kernel):

- **A gateway** (a class's ``gpucloud-nb gateway``, which also keeps each key's own budget,
  ``KEY 20`` in its keys file, :meth:`ServiceBudgets.account_left`; or the personal gateway
  ``connect()`` puts in front of the real cloud or the sandbox): the gateway (:class:`ServiceBudgets` with
  ``prefix="/gateway"``), whether or not a kernel runs; see :mod:`gpucloud_nb.client.gateway`.
- **The real cloud or the sandbox directly** (``GPUCLOUD_GATEWAY=off``, or a client built on
  its own URL; the sandbox keeps no budgets):
  nobody (:class:`UnkeptBudgets`): a budget is refused in one sentence, before anything is sent.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gpucloud_nb.errors import InvalidInputError, NotFoundError

__all__ = ["WARN_SHARE", "BudgetState", "ServiceBudgets", "UnkeptBudgets", "budget_dollars"]

log = logging.getLogger("gpucloud_nb.budgets")
WARN_SHARE = 0.8


def budget_dollars(value: float) -> float:
    """A budget in dollars, checked to be a positive finite number.

        >>> budget_dollars(5)
        5.0
    """
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
            or not value > 0:
        raise InvalidInputError(f"budget must be a positive number of dollars, not {value!r}.")
    return float(value)


@dataclass(frozen=True)
class BudgetState:
    """Where an instance stands against its budget: dollars, and its status when last read."""

    instance_id: str
    dollars: float
    spend: float
    warning: bool
    status: str

    @property
    def left(self) -> float:
        """Dollars left before the delete."""
        return max(self.dollars - self.spend, 0.0)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BudgetState:
        """A state from the gateway's JSON (``GET /gateway/budgets``)."""
        return cls(instance_id=str(data["instanceId"]), dollars=float(data["dollars"]),
                   spend=float(data["spend"]), warning=bool(data["warning"]),
                   status=str(data["status"]))


class ServiceBudgets:
    """Budgets kept by a gateway (see the module docstring; :mod:`gpucloud_nb.gateway.budgets`).

    ``send(method, path, body)`` makes one request and returns the decoded JSON.
    """

    where = "gateway"

    def __init__(self, send: Callable[[str, str, dict[str, Any] | None], Any], *,
                 prefix: str = "/gateway") -> None:
        self._send = send
        self._prefix = prefix
        self.failures: dict[str, str] = {}

    def _path(self, instance_id: str) -> str:
        if not isinstance(instance_id, str) or not instance_id.strip() or "/" in instance_id:
            raise InvalidInputError(f"{instance_id!r} is not a valid id.")
        return f"{self._prefix}/instances/{instance_id}/budget"

    def set(self, instance_id: str, dollars: float) -> BudgetState:
        """Delete ``instance_id`` once it has cost ``dollars``; replaces an earlier budget."""
        answer = self._send("PUT", self._path(instance_id), {"dollars": budget_dollars(dollars)})
        return BudgetState.from_json(answer)

    def cancel(self, instance_id: str) -> bool:
        """Drop the budget of ``instance_id``; it keeps running. True if it had one."""
        try:
            self._send("DELETE", self._path(instance_id), None)
        except NotFoundError:
            return False
        return True

    def states(self) -> dict[str, BudgetState]:
        """Every budget of this account, by instance id."""
        answer = self._send("GET", f"{self._prefix}/budgets", None)
        return {state.instance_id: state for state in
                (BudgetState.from_json(item) for item in answer.get("instances", []))}

    def account_left(self) -> float | None:
        """Dollars left of this key's budget on a class gateway, or ``None`` without one (and
        on a personal gateway)."""
        account = self._send("GET", f"{self._prefix}/budgets", None).get("account")
        return None if account is None else float(account["left"])

    def forget(self, instance_id: str) -> None:
        """A deleted instance's budget ends with it (the service keeps its state); nothing to do."""

    def stop(self) -> None:
        """Nothing runs in this process; the service goes on watching."""


class UnkeptBudgets:
    """Budgets where nobody keeps them: a client of the real cloud directly, not through a
    gateway (``GPUCLOUD_GATEWAY=off``, or ``GPUCloud`` built on the cloud's own URL). No thread
    of this process watches money; setting a budget is one sentence saying why, and a create
    with ``budget=`` is refused before the POST (:mod:`gpucloud_nb.client.instance_ops`).

        >>> UnkeptBudgets().states()
        {}
    """

    where = "nobody"

    def __init__(self) -> None:
        self.deleted: dict[str, datetime] = {}
        self.failures: dict[str, str] = {}

    def set(self, instance_id: str, dollars: float) -> BudgetState:
        """Refused: nothing would keep it (:func:`~gpucloud_nb.client.gateway.unkept`)."""
        from gpucloud_nb.client.gateway import unkept

        budget_dollars(dollars)
        raise InvalidInputError(unkept("a budget"))

    def cancel(self, instance_id: str) -> bool:
        """Nothing to cancel."""
        return False

    def forget(self, instance_id: str) -> None:
        """Nothing is kept."""

    def states(self) -> dict[str, BudgetState]:
        """No budget is kept here."""
        return {}

    def stop(self) -> None:
        """Nothing runs in this process."""
