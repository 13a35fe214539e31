"""Spend budgets: an instance is deleted once it has cost its budget, with a warning at 80 %.

    >>> cloud.budgets.set(instance.id, 5)          # dollars  # doctest: +SKIP
    >>> cloud.budgets.states()[instance.id].warning  # doctest: +SKIP
    False

Who watches, plainly (issue #36: every money rule in one place, never a thread of this kernel):

- **Sandbox**: the sandbox service (:class:`ServiceBudgets`, over the sandbox-only routes of
  :mod:`gpucloud_nb.sandbox.budgets`), whether or not a kernel runs.
- **A gateway** (a class's ``gpucloud-nb gateway``, which also keeps each key's own budget,
  ``KEY 20`` in its keys file, :meth:`ServiceBudgets.account_left`; or the personal gateway
  ``connect()`` puts in front of the real cloud): the gateway (:class:`ServiceBudgets` with
  ``prefix="/gateway"``), whether or not a kernel runs; see :mod:`gpucloud_nb.client.gateway`.
- **The real cloud directly** (``GPUCLOUD_GATEWAY=off``, or a client built on the cloud's URL):
  nobody (:class:`UnkeptBudgets`): a budget is refused in one sentence, before anything is sent.

The kernel's idle watcher still shares :class:`KernelWatcher` and :class:`ConfirmedDeletes`
(deletes confirmed: read until ``deleting`` or ``deleted``, else one sentence in ``failures``
after ``CONFIRM_WITHIN`` seconds, 60), until the gateway keeps idle deletes too.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from gpucloud_nb.errors import GPUCloudError, InvalidInputError, NotFoundError
from gpucloud_nb.models import InstanceDetails

__all__ = ["CONFIRM_WITHIN", "UNKEPT", "WARN_SHARE", "BudgetState", "ConfirmedDeletes",
           "KernelWatcher", "ServiceBudgets", "UnkeptBudgets", "budget_dollars", "confirm_deleted"]

log = logging.getLogger("gpucloud_nb.budgets")
WARN_SHARE = 0.8
CONFIRM_WITHIN = 60.0
GONE = ("deleting", "deleted")


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
        """A state from the sandbox service's JSON (``GET /sandbox/budgets``)."""
        return cls(instance_id=str(data["instanceId"]), dollars=float(data["dollars"]),
                   spend=float(data["spend"]), warning=bool(data["warning"]),
                   status=str(data["status"]))


def confirm_deleted(status: Callable[[], str], within: float = CONFIRM_WITHIN, *,
                    poll: float = 2.0, stop: threading.Event | None = None) -> bool:
    """Read ``status()`` until it is ``deleting`` or ``deleted`` (or the instance is gone).

    True once it is; False if ``within`` seconds pass first, or as soon as ``stop`` is set.
    Errors other than a 404 count as not yet.

        >>> confirm_deleted(lambda: "deleting")
        True
    """
    stop = stop or threading.Event()
    deadline = time.monotonic() + within
    while not stop.is_set():
        try:
            if status() in GONE:
                return True
        except NotFoundError:
            return True
        except GPUCloudError:
            pass
        if time.monotonic() >= deadline:
            return False
        stop.wait(min(poll, max(deadline - time.monotonic(), 0.0)))
    return False


class ConfirmedDeletes:
    """A watcher's deletes: each is sent at once, then confirmed (:func:`confirm_deleted`) on a
    short-lived daemon thread of its own, so the watcher's next step runs on time.

    ``get(id)`` reads an instance and ``delete(id)`` deletes it, both blocking. ``deleted`` maps
    each instance deleted to when; ``failures`` an instance whose delete failed or was not
    confirmed to the sentence saying why. :meth:`stop` ends the confirmations still running
    (the client is closing) without a sentence.

        >>> deletes = ConfirmedDeletes(instances.get, instances.delete, log)  # doctest: +SKIP
        >>> deletes.delete(instance.id, 60, "reached its budget of $5.00", "reached its budget",
        ...                forget=budgets.cancel, said=("Deleted %s.", instance.id))  # doctest: +SKIP
        True
    """

    def __init__(self, get: Callable[[str], InstanceDetails], delete: Callable[[str], None],
                 logger: logging.Logger) -> None:
        self._get, self._delete, self._log = get, delete, logger
        self._stop = threading.Event()
        self.deleted: dict[str, datetime] = {}
        self.failures: dict[str, str] = {}

    def delete(self, instance_id: str, within: float, cause: str, short: str, *,
               forget: Callable[[str], object], said: tuple[object, ...]) -> bool:
        """Delete ``instance_id``, which ``cause`` (``short``: the same without figures); True
        once the cloud took the delete, which is then confirmed within ``within`` seconds.

        On success ``forget(id)`` runs, ``said`` (a message and its arguments) is logged at INFO
        and only then is the instance noted in ``deleted``.
        """
        try:
            self._delete(instance_id)
        except GPUCloudError as error:  # still due: tried again at the next poll
            self.failures[instance_id] = (f"Instance {instance_id} {cause} but the delete "
                                          f"failed: {error}")
            return False
        forget(instance_id)
        self.failures.pop(instance_id, None)
        self._log.info(str(said[0]), *said[1:])
        self.deleted[instance_id] = datetime.now(timezone.utc)  # last: logged once noted
        unconfirmed = (f"Instance {instance_id} {short} and was deleted, but it is not deleting "
                       f"after {within:g} s; it may still be billing.")
        threading.Thread(target=self._confirm, args=(instance_id, within, unconfirmed),
                         name=f"gpucloud-nb-confirm-{instance_id}", daemon=True).start()
        return True

    def _confirm(self, instance_id: str, within: float, unconfirmed: str) -> None:
        try:
            confirmed = confirm_deleted(lambda: self._get(instance_id).status, within,
                                        stop=self._stop)
        except Exception:  # not a cloud's answer: the client closed under it, or a bug
            if not self._stop.is_set():
                self._log.exception("The delete of instance %s could not be confirmed.",
                                    instance_id)
            return
        if not confirmed and not self._stop.is_set():
            self.failures[instance_id] = unconfirmed

    def stop(self) -> None:
        """End the confirmations still running; they note nothing more."""
        self._stop.set()


class KernelWatcher:
    """What this kernel's watchers share: a daemon thread that runs :meth:`step` every ``poll``
    seconds while :meth:`_watching` says there is something to watch, and deletes that are
    confirmed off that thread (:class:`ConfirmedDeletes`).

    ``get(id)`` reads an instance and ``delete(id)`` deletes it, both blocking. A subclass names
    its thread (``thread_name``), its logger (``logger``) and what it watches (``what``).
    """

    thread_name = "gpucloud-nb-watcher"
    what = "watcher"
    logger = log

    def __init__(self, get: Callable[[str], InstanceDetails], delete: Callable[[str], None], *,
                 poll: float, confirm_within: float) -> None:
        self._get, self._delete = get, delete
        self.poll, self.confirm_within = poll, confirm_within
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._wake = threading.Event()
        self._stopped = False
        self._deletes = ConfirmedDeletes(get, delete, self.logger)

    @property
    def deleted(self) -> dict[str, datetime]:
        """Each instance the watcher deleted, to when."""
        return self._deletes.deleted

    @property
    def failures(self) -> dict[str, str]:
        """Each instance whose delete failed or was not confirmed, to the sentence saying why."""
        return self._deletes.failures

    def stop(self) -> None:
        """Stop this kernel's watching and its confirmations (the client is closed)."""
        self._stopped = True
        self._deletes.stop()
        self._wake.set()

    def step(self) -> None:
        """One poll of everything watched."""
        raise NotImplementedError

    def _watching(self) -> bool:
        """True while there is something to watch (called with the lock held)."""
        raise NotImplementedError

    def _start(self) -> None:
        """Start the thread unless it runs or the watcher is stopped; then step at once.
        Called with the lock held."""
        if not self._stopped and (self._thread is None or not self._thread.is_alive()):
            self._thread = threading.Thread(target=self._loop, name=self.thread_name,
                                            daemon=True)
            self._thread.start()
        self._wake.set()

    def _loop(self) -> None:
        while True:
            with self._lock:
                if self._stopped or not self._watching():
                    self._thread = None
                    return
            try:
                self.step()
            except Exception:  # a bug must not end the watching
                self.logger.exception("The %s failed; trying again.", self.what)
            self._wake.wait(self.poll)
            self._wake.clear()


class ServiceBudgets:
    """Budgets kept by the sandbox service (see the module docstring), or by a class gateway
    (``prefix`` ``/gateway``: :mod:`gpucloud_nb.gateway.budgets`, the same routes; ``where`` is
    then ``gateway``).

    ``send(method, path, body)`` makes one request and returns the decoded JSON.
    """

    where = "sandbox service"

    def __init__(self, send: Callable[[str, str, dict[str, Any] | None], Any], *,
                 prefix: str = "/sandbox") -> None:
        self._send = send
        self._prefix = prefix
        if prefix != "/sandbox":
            self.where = "gateway"
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
        always on the sandbox, which keeps no class)."""
        account = self._send("GET", f"{self._prefix}/budgets", None).get("account")
        return None if account is None else float(account["left"])

    def forget(self, instance_id: str) -> None:
        """A deleted instance's budget ends with it (the service keeps its state); nothing to do."""

    def stop(self) -> None:
        """Nothing runs in this process; the service goes on watching."""


UNKEPT = ("This cloud is not a gateway, so nothing would keep a budget: connect() reaches the "
          "real cloud through your personal gateway, which keeps it (unless GPUCLOUD_GATEWAY=off)")


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
        """Refused: nothing would keep it (:data:`UNKEPT`)."""
        budget_dollars(dollars)
        raise InvalidInputError(f"{UNKEPT}.")

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
