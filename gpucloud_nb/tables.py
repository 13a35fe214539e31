"""DataFrames that show themselves as a person reads them, while their values stay raw for code.

:class:`Table` is the :class:`pandas.DataFrame` that ``cloud.spend()``, ``instances_frame``,
``volumes_frame`` (and so ``%gpucloud spend``, ``instances`` and ``volumes``) return. Only its
display changes: in a notebook (``_repr_html_``) and as text (``repr``) it shows

- the name first and ids last (``_id``, ``providerId``, ``user``);
- every cell on one line (the output area scrolls sideways), ports without separators;
- prices and spend as dollars (:func:`gpucloud_nb.display.format_price`; hourly prices as
  ``$2.49/h``);
- times in the kernel's local time zone, as ``11:09`` today and ``Nov 24 11:09`` on another
  day; durations as an age, ``12 min``; hours billed as ``1.25 h``; flags as ``yes``/``no``;
- for spend, a total row, and deleted instances hidden unless ``include_deleted=True``
  (``%gpucloud spend --all``), as the instances panel's "show deleted".

Choices: the rows of deleted instances stay in the DataFrame (money was spent on them, and code
that sums ``frame["spend"]`` or looks an instance up by ``_id`` must find them); only the display
hides them, and then the total row still counts them and says so. Anything derived from a
:class:`Table` (a filter, ``head()``, a column selection) is a plain DataFrame with the usual
display: the formatting belongs to what the package returned, not to what code made of it.
Server text is HTML-escaped.

    >>> spend = cloud.spend()  # doctest: +SKIP
    >>> spend["spend"].sum()  # raw floats for code  # doctest: +SKIP
    0.4216
    >>> spend  # in a notebook: name first, $0.42, "11:09", a Total row  # doctest: +SKIP
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone
from typing import Any, ClassVar, cast

import pandas as pd

from gpucloud_nb.display import format_duration, format_price, per_hour

__all__ = ["Table", "age_text", "table", "time_text"]

_LAST = ("_id", "providerId", "user")
_TOTAL = "Total"


def time_text(value: Any, now: datetime | None = None) -> str:
    """A moment in local time: ``11:09`` today, ``Nov 24 11:09`` another day; ``""`` if missing.

        >>> from datetime import datetime
        >>> time_text(datetime(2026, 11, 24, 11, 9).astimezone(), now=datetime(2026, 11, 24, 12))
        '11:09'
        >>> time_text(datetime(2026, 11, 20, 8, 5).astimezone(), now=datetime(2026, 11, 24, 12))
        'Nov 20 08:05'
    """
    if value is None or not isinstance(value, datetime) or pd.isna(value):
        return ""
    if isinstance(value, pd.Timestamp):
        value = value.to_pydatetime()
    local: datetime = (value if value.tzinfo else value.replace(tzinfo=timezone.utc))
    local = local.astimezone()  # a naive value is read as UTC, as in gpucloud_nb.frames
    today = (now or datetime.now()).astimezone().date()
    if local.date() == today:
        return local.strftime("%H:%M")
    if local.year == today.year:
        return local.strftime("%b %d %H:%M")
    return local.strftime("%Y-%m-%d %H:%M")


def age_text(value: Any) -> str:
    """A duration as an age: ``40 s``, ``12 min``, ``3 h 05 min``, ``2 d 04 h``; ``""`` if missing.

        >>> from datetime import timedelta
        >>> age_text(timedelta(minutes=12, seconds=30)), age_text(timedelta(hours=3, minutes=5))
        ('12 min', '3 h 05 min')
    """
    if not isinstance(value, timedelta) or pd.isna(value):
        return ""
    return format_duration(value.total_seconds(), precise=False)


def _cell(column: str, value: Any) -> str:
    """One value as the table shows it."""
    if value is None or (not isinstance(value, str | bool) and pd.isna(value) is True):
        return ""
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        return "yes" if value else "no"
    if isinstance(value, datetime):
        return time_text(value)
    if isinstance(value, timedelta):
        return age_text(value)
    if isinstance(value, int | float) and not isinstance(value, bool):
        lowered = column.lower()
        if column == "hourlyPrice":
            return per_hour(value)
        if any(word in lowered for word in ("price", "spend", "cost")):
            return format_price(value)
        if column == "hoursBilled":
            return f"{value:,.2f} h"
        number = float(value)
        if not math.isfinite(number):
            return ""
        if lowered.endswith("port") and number.is_integer():
            return str(int(number))  # a port is a name, not a quantity: 39109, not 39,109
        return f"{number:,.0f}" if number.is_integer() else f"{number:,.2f}"
    return str(value)


class Table(pd.DataFrame):
    """A DataFrame whose display is formatted for reading (see the module docs); values raw.

        >>> Table({"spend": [0.5], "name": ["a"], "_id": ["i1"], "status": ["active"]})
         name spend status _id
            a $0.50 active  i1
        Total $0.50
    """

    _metadata: ClassVar[list[str]] = ["hide_deleted"]
    hide_deleted: bool = False

    @property
    def _constructor(self) -> Any:
        return pd.DataFrame  # derived frames are plain: the formatting is for what we returned

    def shown(self) -> pd.DataFrame:
        """The table as displayed: text cells, name first, ids last, deleted hidden, total row."""
        frame = pd.DataFrame(self)
        hidden = 0
        if self.hide_deleted and "status" in frame.columns:
            deleted = (frame["status"] == "deleted").fillna(False).to_numpy(dtype=bool)
            hidden = int(deleted.sum())
            frame = frame[~deleted]
        columns = [str(c) for c in frame.columns]
        first = [c for c in ("name",) if c in columns]
        last = [c for c in _LAST if c in columns]
        order = first + [c for c in columns if c not in first and c not in last] + last
        text = pd.DataFrame({c: [_cell(c, v) for v in frame[c].tolist()] for c in order},
                            columns=order, dtype=object)
        if "spend" in columns:
            total = self.attrs.get("total")
            if not isinstance(total, int | float):
                total = float(pd.to_numeric(self["spend"], errors="coerce").sum())
            label = _TOTAL if not hidden else (
                f"{_TOTAL} ({hidden} deleted not shown)" if hidden > 1
                else f"{_TOTAL} (1 deleted not shown)")
            row = dict.fromkeys(order, "")
            row[order[0]] = label
            row["spend"] = format_price(total)
            text = pd.concat([text, pd.DataFrame([row], columns=order, dtype=object)],
                             ignore_index=True)
        return cast("pd.DataFrame", text)

    def __repr__(self) -> str:
        shown = self.shown()
        if shown.empty:
            return f"(no rows) columns: {', '.join(shown.columns)}"
        return "\n".join(line.rstrip() for line in shown.to_string(index=False).splitlines())

    def _repr_html_(self) -> str:
        shown = self.shown()
        styler = shown.style.format(escape="html").format_index(escape="html", axis="columns")
        styler = styler.hide(axis="index")
        # Names, regions and "Total (1 deleted not shown)" on one line: the output area scrolls.
        styler = styler.set_table_styles([{"selector": "th, td", "props": "white-space: nowrap"}])
        if "spend" in shown.columns and len(shown):
            last = len(shown) - 1
            styler = styler.apply(
                lambda row: ["font-weight: bold; border-top: 1px solid currentColor"
                             if row.name == last else "" for _ in row], axis=1)
        return str(styler.to_html())


def table(frame: pd.DataFrame, *, hide_deleted: bool = False) -> Table:
    """``frame`` as a :class:`Table` (the same values, its ``attrs`` kept)."""
    result = cast("Table", Table(frame))
    result.attrs.update(frame.attrs)
    result.hide_deleted = hide_deleted
    return result
