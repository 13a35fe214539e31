"""The gateway's money rules: spend in a budget window, and admission in one transaction."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpucloud_nb.gateway import money
from gpucloud_nb.gateway.keys import Person
from gpucloud_nb.gateway.store import Store
from tests.helpers import add_history

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


def test_an_idle_limit_goes_with_its_reservation_to_the_instance_adopted() -> None:
    store = Store(":memory:")
    ada = Person("a" * 64, "Ada", None, "", False)
    rid = money.admit(store, ada, "job", 1.0, 1.0, HOUR)
    store.reserve_idle(rid, 900.0)
    assert store.idle_limits() == {}
    store.add_owned("i-9", "instance", ada.account, "job", 1.0, HOUR, rid=rid)  # as reconciled
    assert store.idle_limits() == {"i-9": (ada.account, 900.0)} and store.idle_keyed("i-9")


def _spent_as_before(store: Store, person: Person, now: int) -> float:
    """Spend as every reader summed it before: :func:`money.spend` of all the person billed."""
    return money.spend(store.billed(person.account), now, person.period)


def test_spent_is_the_spend_of_everything_billed_with_a_long_history(tmp_path: Path) -> None:
    # money.spent sums what final records cost once per window and keeps it; each figure must be
    # the one spend() of every record gives, through windows, records becoming final, a record
    # that ends after the sum was taken, and another connection's writes.
    store = Store(tmp_path / "gateway.sqlite3")
    people = [Person(c * 64, name, 50.0, period, False)
              for c, name, period in (("a", "Ada", ""), ("b", "Bob", "day"), ("c", "Cy", "week"))]
    now = 20 * DAY + 3 * HOUR  # 03:00 UTC: a day's window clips the records of the night
    add_history(store, [p.account for p in people], 3_000, end=now)
    store.add_owned("live", "instance", people[1].account, "live", 2.0, now - 5 * HOUR)
    store.add_owned("late", "instance", people[0].account, "late", 3.0, now - HOUR)
    # the upstream's deletedAt is after the gateway's clock: it goes on costing until then
    store.update_owned("late", price=3.0, created_ms=now - HOUR, status="deleted",
                       deleted_ms=now + HOUR, final=True)

    def check(at: int) -> None:
        figures = money.spent(store, people, at)
        for person in people:
            assert figures[person.account] == pytest.approx(_spent_as_before(store, person, at),
                                                            rel=1e-12, abs=1e-12)

    check(now)
    assert money.spent(store, people[1:2], now)[people[1].account] \
        < money.spend(store.billed(people[1].account), now)  # the day's window clips it
    check(now + HOUR // 2)  # "late" still bills, from the cache's copy of it
    check(now + 2 * HOUR)
    store.update_owned("live", price=2.0, created_ms=now - 5 * HOUR, status="deleted",
                       deleted_ms=now + 2 * HOUR, final=True)
    check(now + 3 * HOUR)  # "live" became final: Bob's sum is taken again
    check(now + DAY)  # a new day: a new window
    other = Store(tmp_path / "gateway.sqlite3")  # another process's writes on the same file
    try:
        other.add_owned("theirs", "instance", people[2].account, "theirs", 1.0, now)
        other.update_owned("theirs", price=1.0, created_ms=now, status="deleted",
                           deleted_ms=now + HOUR, final=True)
    finally:
        other.close()
    check(now + DAY)
    check(now + HOUR)  # an earlier clock than the sums were taken at is summed afresh
    store.close()


def test_admission_holds_the_budget_with_a_long_history() -> None:
    # Admission reads the live part of a person's bill and the cached sum of the rest: the
    # refusal still names the dollars left after 2,000 final records (1 $/h for an hour each).
    store = Store(":memory:")
    ada = Person("a" * 64, "Ada", 1_605.0, "", False)
    bob = Person("b" * 64, "Bob", None, "", False)
    now = 1_000 * DAY
    add_history(store, [ada.account, bob.account], 4_000, end=now)  # Ada's cost $1,600
    left = 1_605.0 - _spent_as_before(store, ada, now)
    assert left == pytest.approx(5.0)
    money.admit(store, ada, "one", 2.49, 1.0, now)
    with pytest.raises(money.BudgetRefused, match=r"\$5.00 left"):
        money.admit(store, ada, "two", 2.52, 1.0, now)
    money.admit(store, ada, "two", 2.5, 1.0, now)
    with pytest.raises(money.NameInFlight):
        money.admit(store, bob, "one", 1.0, 1.0, now)
