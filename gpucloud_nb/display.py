"""Prices and durations as people read them: dollars in tables, price columns styled, server
text escaped, ``12 min 34 s``.

:func:`format_price` writes one price, and is the one price formatter of the package (magics,
widgets, tables, the client's sentences, the CLI); :func:`style_prices` turns a DataFrame into a
pandas Styler that shows its price columns as dollars and escapes every other cell, since names
come from the server. Both are re-exported by :mod:`gpucloud_nb.frames`. pandas is imported only
by :func:`style_prices`, so the client can format prices without it.

    >>> style_prices(offers_frame(offers).head())  # in a notebook cell: $2.49, $0.00014 ...  # doctest: +SKIP
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:  # importing the Styler needs jinja2: only style_prices pays for it
    import pandas as pd
    from pandas.io.formats.style import Styler

__all__ = ["format_duration", "format_price", "per_hour", "style_prices"]

# Price-like columns that style_prices formats as currency, besides any name with these words.
_PRICE_COLUMNS = frozenset(
    {"hourlyPrice", "pricePerGpuHour", "pricePerGbPerHour", "pricePerGbMonth"}
)
_PRICE_WORDS = ("price", "spend", "hourly", "cost")


def format_price(value: Any) -> str:
    """A price as dollars: cents from $0.10 up, two significant digits below, never ``e-05``.

        >>> format_price(2.49), format_price(0.00014), format_price(1234.5), format_price(9e-05)
        ('$2.49', '$0.00014', '$1,234.50', '$0.00009')
        >>> format_price(0.05), format_price(0.0999), format_price("0.25"), format_price(None)
        ('$0.05', '$0.10', '$0.25', '')
    """
    try:
        number = float(value)
    except (TypeError, ValueError):
        return ""
    if not math.isfinite(number):
        return ""
    magnitude = abs(number)
    if magnitude >= 0.1 or magnitude == 0:
        text = f"{magnitude:,.2f}"
    else:
        digits = 1 - math.floor(math.log10(magnitude))
        text = f"{magnitude:.{digits}f}".rstrip("0")  # 0.000090 → 0.00009
        if len(text.partition(".")[2]) < 2:  # 0.0999 rounds to 0.1: show cents, $0.10
            text = f"{float(text):.2f}"
    return f"-${text}" if number < 0 else f"${text}"


def format_duration(seconds: float | None, *, precise: bool = True) -> str:
    """A duration: ``12 s``, ``12 min 34 s``, ``2 h 03 min``, ``4 d 02 h``; ``""`` if missing.

    The one duration formatter of the package (countdowns, waits, ages). ``precise=False``
    drops the seconds from an hour's minutes, for ages in tables.

        >>> format_duration(754), format_duration(754, precise=False), format_duration(7380)
        ('12 min 34 s', '12 min', '2 h 03 min')
    """
    if seconds is None or not math.isfinite(seconds):
        return ""
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes, secs = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s" if precise else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes:02d} min"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours:02d} h"


def per_hour(value: float | None) -> str:
    """An hourly price: ``$2.49/h``; ``""`` for a missing one.

        >>> per_hour(2.49)
        '$2.49/h'
    """
    text = format_price(value)
    return f"{text}/h" if text else ""


def _is_price_column(name: Any, series: pd.Series) -> bool:
    import pandas as pd

    if not pd.api.types.is_numeric_dtype(series) or pd.api.types.is_bool_dtype(series):
        return False
    if name in _PRICE_COLUMNS:
        return True
    lowered = str(name).lower()
    return any(word in lowered for word in _PRICE_WORDS)


def style_prices(df: pd.DataFrame, columns: Sequence[str] | None = None) -> Styler:
    """A :class:`~pandas.io.formats.style.Styler` showing price columns as dollars, index hidden.

    Formats ``hourlyPrice``, ``pricePerGpuHour``, ``pricePerGbPerHour``, ``pricePerGbMonth`` and
    any numeric column whose name mentions price, spend, hourly or cost (or exactly ``columns``,
    when given) with :func:`format_price`. Every other cell, and the column names, are
    HTML-escaped: names and images come from the server, and a name like
    ``<img src=x onerror=...>`` must show as text, never run. The frame itself is left a plain
    DataFrame.

        >>> style_prices(offers_frame(offers).head())  # doctest: +SKIP
    """
    if columns is None:
        columns = [c for c in df.columns if _is_price_column(c, df[c])]
    styler = df.style.format(escape="html").format_index(escape="html", axis="columns")
    styler = styler.format(format_price, subset=list(columns), na_rep="")
    return cast("Styler", styler.hide(axis="index"))
