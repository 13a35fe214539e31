"""The one duration formatter: countdowns and waits to the second, ages in tables to the minute."""

from __future__ import annotations

from datetime import timedelta

from gpucloud_nb.display import format_duration
from gpucloud_nb.tables import age_text


def test_durations_for_people() -> None:
    assert format_duration(12) == "12 s"
    assert format_duration(754) == "12 min 34 s"
    assert format_duration(2 * 3600 + 180) == "2 h 03 min"
    assert format_duration(3 * 86400 + 7200) == "3 d 02 h"
    assert format_duration(-5) == "0 s"
    assert format_duration(None) == "" and format_duration(float("nan")) == ""


def test_ages_in_tables_drop_the_seconds_and_say_the_same_above_an_hour() -> None:
    assert format_duration(754, precise=False) == "12 min"
    assert age_text(timedelta(seconds=754)) == "12 min"
    assert age_text(timedelta(seconds=40)) == "40 s"
    for seconds in (3 * 3600 + 300, 2 * 86400 + 4 * 3600):
        assert age_text(timedelta(seconds=seconds)) == format_duration(seconds)
