"""Widget plumbing: show and hide, stable CSS classes, a confirm row, and walking and closing a
widget's tree (layouts and styles included).

    >>> import ipywidgets as widgets
    >>> box = widgets.VBox([widgets.HTML("a")])
    >>> len(list(iter_widgets(box))) > 2
    True
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

import ipywidgets as widgets

from gpucloud_nb.widgets._format import escape

__all__ = ["STYLE", "ConfirmRow", "close_tree", "css", "iter_widgets", "show"]


#: Descriptions at their natural width instead of ipywidgets' cramped fixed column.
STYLE: dict[str, str] = {"description_width": "initial"}


def show(widget: widgets.Widget, visible: bool = True) -> None:
    """Show or hide a widget (it keeps its state while hidden)."""
    widget.layout.display = None if visible else "none"


W = TypeVar("W", bound=widgets.DOMWidget)


def css(widget: W, name: str) -> W:
    """``widget`` with the DOM class ``name`` (a stable selector for tests and themes)."""
    widget.add_class(name)
    return widget


class ConfirmRow:
    """A question in bold with a danger button and Cancel, hidden until :meth:`ask` shows it.

        >>> row = ConfirmRow("gpucloud-delete", "Confirm delete", "trash")
        >>> row.ask("Delete train-1?"); row.question.value, row.box.layout.display
        ('<b>Delete train-1?</b>', None)

    Its DOM classes are ``<prefix>-confirm`` (the row), ``<prefix>-question``,
    ``<prefix>-confirm-button`` and ``<prefix>-cancel-button``.
    """

    def __init__(self, prefix: str, confirm: str, icon: str) -> None:
        self.question = css(widgets.HTML(), f"{prefix}-question")
        self.confirm_button = css(widgets.Button(description=confirm, icon=icon,
                                                 button_style="danger"), f"{prefix}-confirm-button")
        self.cancel_button = css(widgets.Button(description="Cancel"), f"{prefix}-cancel-button")
        self.box = css(widgets.HBox([self.question, self.confirm_button, self.cancel_button]),
                       f"{prefix}-confirm")
        show(self.box, False)

    def ask(self, question: str) -> None:
        """Show the row with ``question`` (escaped)."""
        self.question.value = f"<b>{escape(question)}</b>"
        show(self.box, True)

    def hide(self) -> None:
        """Hide the row; nothing else changes."""
        show(self.box, False)


def iter_widgets(root: widgets.Widget) -> Iterator[widgets.Widget]:
    """Every widget reachable from ``root`` through ``children``, layouts and styles included."""
    seen: set[int] = set()
    stack: list[Any] = [root]
    while stack:
        widget = stack.pop()
        if not isinstance(widget, widgets.Widget) or id(widget) in seen:
            continue
        seen.add(id(widget))
        yield widget
        for name in widget.keys:
            value = getattr(widget, name, None)
            if isinstance(value, widgets.Widget):
                stack.append(value)
            elif isinstance(value, list | tuple):
                stack.extend(v for v in value if isinstance(v, widgets.Widget))


def close_tree(widget: widgets.Widget, keep: Iterable[widgets.Widget] = ()) -> None:
    """Close a widget and everything under it, except the shared ``keep`` (layouts, styles)."""
    kept = {id(k) for k in keep}
    for child in list(iter_widgets(widget)):
        if id(child) not in kept:
            child.close()
