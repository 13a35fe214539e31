"""The gateway's money rules: spend in a budget window, and admission in one transaction."""

from __future__ import annotations

import pytest

from gpucloud_nb.gateway import money
from gpucloud_nb.gateway.keys import Person
from gpucloud_nb.gateway.store import Store

DAY = money.DAY_MS
HOUR = money.HOUR_MS


def test_a_daily_budget_counts_only_today() -> None:
    store = Store(":memory:")
    now = 10 * DAY + 2 * HOUR  # 02:00 UTC on day 10
    store.add_owned("i-1", "instance", "acc", "night", 4.0, now - 5 * HOUR)  # since 21:00
    records = store.owned("acc")
    assert money.spend(records, now) == pytest.approx(20.0)
    assert money.spend(records, now, "day") == pytest.approx(8.0)  # reset at midnight
    ada = Person("h" * 64, "Ada", 10.0, "day", False)
    assert money.left(ada, records, now) == pytest.approx(2.0)


def test_a_weekly_window_starts_on_monday() -> None:
    monday = 4 * DAY  # 1970-01-05 was a Monday
    assert money.window_start("week", monday + 3 * DAY + 5) == monday
    assert money.window_start("week", monday - 1) == monday - 7 * DAY


def test_admission_holds_what_runs_and_what_is_admitted() -> None:
    store = Store(":memory:")
    ada = Person("a" * 64, "Ada", 10.0, "", False)
    now = 1_000 * HOUR
    money.admit(store, ada, "one", 4.0, 1.0, now)  # admitted, not answered yet: still held
    money.admit(store, ada, "two", 4.0, 1.0, now)
    with pytest.raises(money.BudgetRefused, match=r"\$10.00 left"):
        money.admit(store, ada, "three", 4.0, 1.0, now)
    assert len(store.reservations("acc")) == 0 and len(store.reservations()) == 2


def test_an_error_instance_costs_nothing() -> None:
    store = Store(":memory:")
    store.add_owned("i-1", "instance", "acc", "bad", 4.0, 0)
    store.update_owned("i-1", price=4.0, created_ms=0, status="error", deleted_ms=None, final=True)
    assert money.spend(store.owned("acc"), 10 * HOUR) == 0


def test_two_peoples_creates_of_one_name_are_never_admitted_together() -> None:
    store = Store(":memory:")
    ada, bob = (Person(c * 64, name, None, "", False) for c, name in (("a", "Ada"), ("b", "Bob")))
    first = money.admit(store, ada, "job", 1.0, 1.0, HOUR)
    money.admit(store, ada, "job", 1.0, 1.0, HOUR)  # one person's: theirs either way
    with pytest.raises(money.NameInFlight):
        money.admit(store, bob, "job", 1.0, 1.0, HOUR)
    assert money.admit(store, bob, "other", 1.0, 1.0, HOUR)
    store.add_owned("i-1", "instance", ada.account, "job", 1.0, HOUR, rid=first)
    store.fail_reservation(first + 1)
    assert money.admit(store, bob, "job", 1.0, 1.0, HOUR)  # Ada's are answered now
