"""Argument types shared by the ``gpucloud-nb`` commands (sandbox, gateway): one sentence each.

    >>> port("8765"), seconds("2.5"), hours("1")
    (8765, 2.5, 1.0)
    >>> port("http")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: 'http' is not a port number
"""

from __future__ import annotations

import argparse
import math

__all__ = ["hours", "port", "positive", "seconds"]


def port(text: str) -> int:
    """A TCP port, 0 (any free one) to 65535."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not between 0 and 65535")
    return value


def _number(text: str, unit: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number{unit}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number{unit}")
    return value


def seconds(text: str) -> float:
    """Zero or more seconds."""
    value = _number(text, " of seconds")
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be zero or more seconds")
    return value


def positive(text: str) -> float:
    """A number more than zero."""
    value = _number(text, "")
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be more than zero")
    return value


def hours(text: str) -> float:
    """More than zero hours."""
    value = _number(text, " of hours")
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be more than zero hours")
    return value
