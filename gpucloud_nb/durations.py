"""Durations a person types: ``90s``, ``30m``, ``30min``, ``2h``, ``1h30m``, ``1d``; the one parser.

    >>> parse_duration("1h30m"), parse_duration("90s"), parse_duration("30 min")
    (5400.0, 90.0, 1800.0)

The launch form's fields, ``%gpucloud launch --idle / --delete-after`` and the instances panel's
auto-delete field all read what is typed here; the API itself takes seconds or a ``timedelta``
(``delete_after=``, ``delete_when_idle=``).

Choices where the interface is silent: a duration needs a unit. A bare number is refused in one
sentence that shows an example, since "30" is 30 minutes to one reader and 30 seconds to
another. Units are ``s`` / ``sec``, ``m`` / ``min``, ``h`` / ``hr``, ``d`` (any case, plural
``s`` allowed), combined largest first (``1h30m``, spaces allowed); decimals are allowed
(``1.5h``); the total must be more than zero and at most :data:`MAX_SECONDS` (30 days). Empty
text is "none" where a field may be left empty (:func:`parse_optional_duration`).
"""

from __future__ import annotations

import re

__all__ = ["MAX_SECONDS", "duration_text", "parse_duration", "parse_optional_duration"]

MAX_SECONDS = 30 * 24 * 3600.0
"""The longest duration accepted (30 days)."""

_UNITS = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0}
_PART = r"([0-9]+(?:\.[0-9]+)?)\s*(days?|d|hours?|hrs?|h|minutes?|mins?|m|seconds?|secs?|s)"
_WHOLE = re.compile(rf"\s*(?:{_PART}\s*)+", re.ASCII | re.IGNORECASE)
_EACH = re.compile(_PART, re.ASCII | re.IGNORECASE)
_BARE = re.compile(r"\s*[0-9]+(?:\.[0-9]+)?\s*", re.ASCII)


def parse_duration(text: str, what: str = "A duration") -> float:
    """``text`` in seconds; :class:`ValueError` with one sentence when it is not a duration.

        >>> parse_duration("2h"), parse_duration("1.5h"), parse_duration("1d 2h")
        (7200.0, 5400.0, 93600.0)
        >>> parse_duration("30")
        Traceback (most recent call last):
        ...
        ValueError: A duration needs a unit: '30' could be minutes or seconds; write e.g. 30m or 90s.
    """
    if _BARE.fullmatch(text):
        number = text.strip()
        raise ValueError(f"{what} needs a unit: {number!r} could be minutes or seconds; "
                         f"write e.g. {number}m or 90s.")
    if not _WHOLE.fullmatch(text):
        raise ValueError(f"{what} must be written like 30m, 90s, 2h or 1h30m, not {text!r}.")
    parts = _EACH.findall(text)
    scales = [_UNITS[unit[0].lower()] for _, unit in parts]
    if scales != sorted(scales, reverse=True) or len(set(scales)) != len(scales):
        raise ValueError(f"{what} must give each unit once, largest first (1h30m), "
                         f"not {text!r}.")
    seconds = sum(float(number) * scale for (number, _), scale in zip(parts, scales, strict=True))
    if not 0 < seconds <= MAX_SECONDS:
        raise ValueError(f"{what} must be more than zero and at most 30 days, not {text!r}.")
    return seconds


def parse_optional_duration(text: str, what: str = "A duration") -> float | None:
    """As :func:`parse_duration`, but empty text (a field left empty) is ``None``.

        >>> parse_optional_duration("  ") is None, parse_optional_duration("45min")
        (True, 2700.0)
    """
    return None if not text.strip() else parse_duration(text, what)


def duration_text(seconds: float) -> str:
    """``seconds`` as :func:`parse_duration` reads it back: what a field shows for a value set
    from code.

        >>> duration_text(5400), duration_text(90), duration_text(86400), duration_text(2.5)
        ('1h30m', '1m30s', '1d', '2.5s')
    """
    left, parts = float(seconds), list[str]()
    for unit, scale in _UNITS.items():
        if unit == "s":
            if left or not parts:
                parts.append(f"{round(left, 3):g}s")
        elif left >= scale:
            count = int(left // scale)
            parts.append(f"{count}{unit}")
            left -= count * scale
    return "".join(parts)
