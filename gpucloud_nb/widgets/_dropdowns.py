"""Dropdowns that keep the person's choice when their options change, and show ``None`` options.

    >>> import ipywidgets as widgets
    >>> region = widgets.Dropdown(options=[("any", None), ("us-east-1", "us-east-1")])
    >>> choose(region, "mars-1", "{} (no offers)"); region.label
    'mars-1 (no offers)'
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import ipywidgets as widgets

from gpucloud_nb.errors import InvalidInputError

__all__ = ["choose", "set_options"]


def set_options(dropdown: widgets.Dropdown, options: Sequence[tuple[str, Any]], value: Any = None,
                *, keep: bool = True) -> None:
    """Replace a dropdown's options, keeping its value when still offered, else ``value``.

    ipywidgets resets the selection to the first option when options change; this keeps the
    user's choice instead, and falls back to ``value`` (or the first option).
    """
    previous = dropdown.value
    options = list(options)
    values = [v for _, v in options]
    dropdown.options = options
    if keep and previous in values:
        _select(dropdown, values.index(previous))
    elif value in values:
        _select(dropdown, values.index(value))
    elif options:
        _select(dropdown, 0)


def _select(dropdown: widgets.Dropdown, position: int) -> None:
    dropdown.index = position
    if dropdown.index != position:  # ipywidgets 8 clears the index when the value becomes None
        dropdown.index = position


def choose(dropdown: widgets.Dropdown, value: Any, unknown_label: str | None = None) -> None:
    """Select ``value``, adding it (labelled ``unknown_label``) when the dropdown lacks it.

    Selects by index: ipywidgets 8 shows a blank dropdown for ``value = None`` even when an
    option ("any", "none") has that value.

        >>> choose(region_dropdown, None)            # shows "any"  # doctest: +SKIP
        >>> choose(region_dropdown, "mars-1", "{} (no offers)")  # doctest: +SKIP
    """
    values = [v for _, v in dropdown.options]
    if value not in values:
        if unknown_label is None:
            raise InvalidInputError(f"{value!r} is not one of the choices for {dropdown.description}.")
        dropdown.options = [*dropdown.options, (unknown_label.format(value), value)]
        values.append(value)
    _select(dropdown, values.index(value))
