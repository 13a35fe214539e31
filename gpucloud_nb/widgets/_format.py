"""Text the widgets show: dollars, escaped server text, and DataFrames as HTML tables.

Money is shown with :func:`gpucloud_nb.display.format_price`: ``$2.49/h``, ``$59.76/day``.

    >>> per_hour(2.49), per_day(2.49)
    ('$2.49/h', '$59.76/day')
    >>> escape("<b>"), join_nonempty(["a", "", "b"])
    ('&lt;b&gt;', 'a · b')
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from gpucloud_nb.display import format_price, per_hour

__all__ = ["cell_text", "escape", "frame_html", "join_nonempty", "money", "per_day", "per_hour"]


def money(value: float | None) -> str:
    """Dollars: ``$2.49``, ``$0.00014``, ``$1,234.50``; ``""`` for a missing value."""
    return format_price(value)


def per_day(hourly: float | None) -> str:
    """An hourly price as a daily one: ``$59.76/day``."""
    try:
        daily = float(hourly) * 24  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return ""
    text = money(daily)
    return f"{text}/day" if text else ""


def escape(value: Any) -> str:
    """Text from the server, safe inside HTML."""
    return html.escape("" if value is None else str(value))


def join_nonempty(parts: Iterable[str], separator: str = " · ") -> str:
    """Join the non-empty parts."""
    return separator.join(part for part in parts if part)


def cell_text(value: Any) -> str:
    """Plain text for a table cell: blanks for missing values, ``yes``/``no`` for flags."""
    if value is None:
        return ""
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        return "yes" if value else "no"
    if isinstance(value, float):
        if not math.isfinite(value):
            return ""
        return f"{value:,.0f}" if value.is_integer() else f"{value:,.2f}"
    try:
        import pandas as pd

        if pd.isna(value):
            return ""
    except (TypeError, ValueError):
        pass
    return str(value)


def _header_html(name: Any) -> str:
    """A column name, escaped, with a line break allowed between its camelCase words."""
    return re.sub(r"(?<=[a-z0-9]{2})(?=[A-Z])", "<wbr>", escape(str(name)))


def frame_html(frame: Any, *, price_columns: Sequence[str] = (),
               formatters: dict[str, Callable[[Any], str]] | None = None,
               table_class: str = "gpucloud-table") -> str:
    """A DataFrame as an HTML table: prices as dollars, every other cell escaped text.

    Uses :func:`gpucloud_nb.frames.style_prices` (a pandas Styler, index hidden) for the
    ``price_columns``; ``formatters`` maps other columns to functions returning plain text (it is
    escaped here: offer and instance text comes from a server). A header may wrap between the
    words of its camelCase name (``price·Per·Gpu·Hour``): a column is then as wide as its values,
    so the offers table fits a notebook beside the file browser instead of ending in a header
    cut in half (``pricePerGpuHo``).
    """
    from gpucloud_nb.frames import style_prices

    formatters = formatters or {}
    prices = [c for c in price_columns if c in frame.columns]
    styler = style_prices(frame, columns=prices)
    for column in frame.columns:
        if column in prices:
            continue
        text = formatters.get(column, cell_text)
        styler = styler.format(lambda value, text=text: escape(text(value)), subset=[column])
    styler = styler.format_index(_header_html, axis=1)
    styler = styler.set_table_attributes(
        f'class="{escape(table_class)}" style="border-collapse:collapse;font-size:0.9em"'
    )
    styler = styler.set_table_styles([
        {"selector": "th", "props": "text-align:left;vertical-align:bottom;padding:2px 6px;"
                                    "line-height:1.3;border-bottom:1px solid var(--jp-border-color2)"},
        {"selector": "td", "props": "padding:2px 6px;line-height:1.4;white-space:nowrap"},
    ])
    return styler.to_html()
