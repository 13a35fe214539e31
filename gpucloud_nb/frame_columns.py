"""Typed DataFrame columns from loose values: the dtypes every frame of :mod:`gpucloud_nb.frames` uses.

Numbers become ``float64`` (NaN when missing) or ``int64`` (0 when missing), flags ``bool``,
text pandas' default string dtype with ``None`` and ``""`` as NA, date-times UTC with the epoch
sentinel as NaT. Each is built in one pass over a list, falling back to the loose readers of
:mod:`gpucloud_nb.decoding` only when the fast conversion fails.

    >>> float_column([1, "2.5", None]).tolist()
    [1.0, 2.5, nan]
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

import numpy as np
import pandas as pd

from gpucloud_nb.decoding import to_float, to_int

__all__ = ["STR_DTYPE", "bool_column", "category_column", "datetime_column", "float_column",
           "int_column", "text_column", "utc_timestamp"]

#: pandas' default dtype for text: ``str`` on pandas 3, ``object`` on pandas 2.
STR_DTYPE: Any = pd.Series(["x"]).dtype
_TEXT_IS_OBJECT = pd.api.types.is_object_dtype(STR_DTYPE)
_DATETIME_DTYPE = pd.DatetimeTZDtype(unit="ns", tz="UTC")
_EPOCH = pd.Timestamp(0, tz="UTC")


def float_column(values: list[Any]) -> np.ndarray:
    """Numbers as ``float64``; ``None`` and anything that is not a number become NaN."""
    try:
        return np.array(values, dtype=np.float64)
    except (TypeError, ValueError):
        return np.fromiter(map(to_float, values), dtype=np.float64, count=len(values))


def int_column(values: list[Any]) -> np.ndarray:
    """Counts and ports as ``int64``; anything that is not a number becomes 0."""
    try:
        return np.array(values, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        return np.fromiter(map(to_int, values), dtype=np.int64, count=len(values))


def bool_column(values: list[Any]) -> np.ndarray:
    """Flags as ``bool`` (records hold real flags: truthiness is enough)."""
    return np.fromiter(values, dtype=bool, count=len(values))


def text_column(values: list[Any], keep_empty: bool = False) -> Any:
    """A text column in pandas' default string dtype; ``None`` and ``""`` are missing (NA),
    unless ``keep_empty`` (a joined list, where ``""`` means "none")."""
    if not keep_empty:
        values = [v if v.__class__ is str and v else (str(v) if v else None) for v in values]
    if _TEXT_IS_OBJECT:
        return np.fromiter(values, dtype=object, count=len(values))
    return pd.array(np.fromiter(values, dtype=object, count=len(values)), dtype=STR_DTYPE)


def category_column(codes: np.ndarray, categories: pd.Index) -> pd.Categorical[Any]:
    """A categorical column from integer ``codes`` into ``categories`` (unique; each code
    ``-1`` or a position in them, which the caller guarantees: they are not checked again)."""
    return pd.Categorical.from_codes(codes, dtype=pd.CategoricalDtype(categories), validate=False)


def datetime_column(values: list[Any]) -> pd.DatetimeIndex:
    """ISO 8601 strings (or datetimes) → UTC; unparsable, null and the epoch sentinel give NaT.

    A naive value is read as UTC.
    """
    clean = [v if isinstance(v, str | datetime) and v else None for v in values]
    parsed = pd.to_datetime(
        pd.Series(clean, dtype=object), utc=True, format="ISO8601", errors="coerce"
    )
    index = pd.DatetimeIndex(parsed).astype(_DATETIME_DTYPE)
    return cast("pd.DatetimeIndex", pd.DatetimeIndex(index.where(~(index <= _EPOCH))))


def utc_timestamp(now: datetime | pd.Timestamp | str | None) -> pd.Timestamp:
    stamp = pd.Timestamp.now(tz="UTC") if now is None else pd.Timestamp(now)
    if stamp.tzinfo is None:
        return cast("pd.Timestamp", stamp.tz_localize("UTC"))
    return cast("pd.Timestamp", stamp.tz_convert("UTC"))
