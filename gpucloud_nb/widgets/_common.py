"""Helpers shared by the widgets: the status/error line, background work, debounce, formatting.

Nothing here talks HTTP; the widgets go through :mod:`gpucloud_nb.client`.

    >>> status = StatusLine("gpucloud-launch-status")
    >>> status.error(InvalidInputError("Give the instance a name."))
    >>> status.text, status.is_error
    ('Give the instance a name.', True)
    >>> per_hour(2.49), per_day(2.49)
    ('$2.49/h', '$59.76/day')

Choices, written down once:

- A user error is the ``str`` of a :class:`~gpucloud_nb.errors.GPUCloudError` (one sentence);
  anything else is "Something went wrong: <ExceptionType>: <message>", and its traceback goes to
  the ``gpucloud_nb.widgets`` logger at debug level, never to the screen.
- Background work runs in daemon threads, so a kernel can always exit
  and headless tests need no event loop. ipykernel accepts widget updates from any thread.
- Every colour is a JupyterLab CSS variable (``--jp-ui-font-color2`` for hints, the accent
  colours through :func:`tone` for warnings, errors and success), never a fixed hex value, so
  the widgets read well in the light and the dark theme alike.
- Money is shown with :func:`gpucloud_nb.frames.format_price`: ``$2.49/h``, ``$59.76/day``.
"""

from __future__ import annotations

import atexit
import functools
import html
import inspect
import logging
import math
import re
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, InvalidStateError
from typing import Any, TypeVar

import ipywidgets as widgets

from gpucloud_nb._secrets import scrub, scrub_exception
from gpucloud_nb.display import format_price, per_hour
from gpucloud_nb.errors import GPUCloudError, InvalidInputError

__all__ = [
    "ERROR",
    "HINT",
    "STYLE",
    "SUCCESS",
    "WARNING",
    "ConfirmRow",
    "Debouncer",
    "Repeater",
    "StatusLine",
    "close_tree",
    "css",
    "describe_error",
    "guarded",
    "hint",
    "iter_widgets",
    "money",
    "per_day",
    "per_hour",
    "set_options",
    "settle",
    "show",
    "tone",
]

log = logging.getLogger("gpucloud_nb.widgets")

#: Descriptions at their natural width instead of ipywidgets' cramped fixed column.
STYLE: dict[str, str] = {"description_width": "initial"}

T = TypeVar("T")


# --------------------------------------------------------------------------- errors


def describe_error(error: BaseException, *secrets: str | None,
                   mask: Callable[[str], str] = str) -> str:
    """One sentence for the screen: the error's own for ours, a labelled one for the unexpected.

    The traceback of an unexpected one goes to the debug log. ``secrets``, and any URL's user
    name and password, are masked in both (:func:`gpucloud_nb._secrets.scrub`), and so is
    whatever ``mask`` masks (a client's :meth:`~gpucloud_nb.client.inference.InferenceClient.scrub`).
    """
    if isinstance(error, GPUCloudError):
        return mask(scrub(str(error), *secrets))
    log.debug("Unexpected error in a gpucloud_nb widget:\n%s",
              mask(scrub_exception(error, *secrets)))
    message = str(error).strip().splitlines()[0] if str(error).strip() else ""
    kind = type(error).__name__
    return mask(scrub(f"Something went wrong: {kind}: {message}" if message
                      else f"Something went wrong: {kind}.", *secrets))




def tone(variable: str) -> str:
    """A JupyterLab colour variable pulled towards the theme's text colour, for text.

    JupyterLab's accent colours are made for icons and borders; as text some fall under WCAG AA
    (``--jp-warn-color0`` on white is 3.8:1). Mixing 30% of ``--jp-ui-font-color0`` in
    darkens them on a light theme and lightens them on a dark one, so text stays above 4.5:1.

        >>> tone("--jp-warn-color0")
        'color-mix(in srgb, var(--jp-warn-color0) 70%, var(--jp-ui-font-color0))'
    """
    return f"color-mix(in srgb, var({variable}) 70%, var(--jp-ui-font-color0))"


#: Text colours, all from JupyterLab's theme variables (light and dark alike).
HINT = "var(--jp-ui-font-color2)"
WARNING = tone("--jp-warn-color0")
ERROR = tone("--jp-error-color1")
SUCCESS = tone("--jp-success-color0")

_COLOURS = {"info": HINT, "success": SUCCESS, "error": ERROR, "warning": WARNING}


def hint(text_html: str, colour: str = HINT) -> str:
    """HTML (already escaped) in a theme colour: a dimmer hint by default.

        >>> hint("updated 11:09")
        '<span style="color:var(--jp-ui-font-color2)">updated 11:09</span>'
    """
    return f'<span style="color:{colour}">{text_html}</span>'



class StatusLine(widgets.HTML):
    """A one-line message under a widget: information, success or an error (one sentence).

    CSS classes: ``gpucloud-status`` always, the class given at construction, and
    ``gpucloud-error`` while an error is shown.
    """

    def __init__(self, css_class: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.add_class("gpucloud-status")
        if css_class:
            self.add_class(css_class)
        self.text = ""
        self.kind = "info"

    @property
    def is_error(self) -> bool:
        """True while an error is shown."""
        return self.kind == "error" and bool(self.text)

    def _show(self, text: str, kind: str) -> None:
        self.text, self.kind = text, kind
        if kind == "error":
            self.add_class("gpucloud-error")
        else:
            self.remove_class("gpucloud-error")
        if not text:
            self.value = ""
            return
        icon = {"error": "⚠ ", "success": "✓ ", "warning": "⏸ "}.get(kind, "")
        self.value = hint(html.escape(icon + text), _COLOURS[kind])

    def info(self, text: str) -> None:
        """Show a neutral message."""
        self._show(text, "info")

    def success(self, text: str) -> None:
        """Show that something worked."""
        self._show(text, "success")

    def warning(self, text: str) -> None:
        """Show something the user should notice that is not a failure."""
        self._show(text, "warning")

    def error(self, error: BaseException | str) -> None:
        """Show an error as one sentence (see :func:`describe_error`)."""
        self._show(error if isinstance(error, str) else describe_error(error), "error")

    def clear(self) -> None:
        """Show nothing."""
        self._show("", "info")


def guarded(status: StatusLine, function: Callable[..., T]) -> Callable[..., T | None]:
    """Wrap an observer or click handler so that it never raises: errors go to ``status``."""

    @functools.wraps(function)
    def handler(*args: Any, **kwargs: Any) -> T | None:
        try:
            return function(*args, **kwargs)
        except Exception as error:
            status.error(error)
            return None

    return handler


# --------------------------------------------------------------------------- background work


def settle(future: Future[Any], result: Any = None, error: BaseException | None = None) -> bool:
    """Resolve ``future`` unless it is already done; return True when this call resolved it."""
    try:
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)
    except InvalidStateError:  # already settled: a stop won the race
        return False
    return True




class Debouncer:
    """Call ``function`` once, ``delay`` seconds after the last trigger; ``delay=0`` calls at once.

    The delayed call runs in a timer thread; ``function`` must not raise (wrap it with
    :func:`guarded`).
    """

    def __init__(self, delay: float, function: Callable[[], Any]) -> None:
        self.delay = delay
        self._function = function
        self._timer: threading.Timer | None = None
        self._lock = threading.Lock()

    @property
    def pending(self) -> bool:
        """True while a delayed call is waiting."""
        return self._timer is not None

    def __call__(self) -> None:
        if self.delay <= 0:
            self.cancel()
            self._function()
            return
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
            timer = threading.Timer(self.delay, self._fire)
            timer.daemon = True
            self._timer = timer
            timer.start()

    def _fire(self) -> None:
        with self._lock:
            if self._timer is None or threading.current_thread() is not self._timer:
                return
            self._timer = None
        self._function()

    def cancel(self) -> None:
        """Forget a waiting call."""
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

    def flush(self) -> None:
        """Make a waiting call now."""
        if self.pending:
            self.cancel()
            self._function()


#: Every Repeater that may be running, so that Python's exit (a kernel shutting down) stops them.
_REPEATERS: weakref.WeakSet[Repeater] = weakref.WeakSet()


@atexit.register
def stop_all_repeaters() -> None:
    """Stop every periodic refresh (run at interpreter exit)."""
    for repeater in list(_REPEATERS):
        repeater.close()


class Repeater:
    """Call ``function`` every ``interval`` seconds in a daemon thread, between start and stop.

    ``function`` may call :meth:`stop` itself; a later :meth:`start` begins a fresh thread. A
    bound method is held weakly: once its widget is garbage-collected the thread ends by itself,
    so a dropped widget never polls on. Every repeater stops when Python exits.
    """

    def __init__(self, interval: float, function: Callable[[], Any], name: str = "gpucloud-nb-timer"):
        self.interval = interval
        self._function: Callable[[], Callable[[], Any] | None] = (
            weakref.WeakMethod(function) if inspect.ismethod(function) else lambda: function)
        self._name = name
        self._stop: threading.Event | None = None
        self._closed = False
        self._lock = threading.Lock()
        _REPEATERS.add(self)

    @property
    def running(self) -> bool:
        """True between :meth:`start` and :meth:`stop`."""
        return self._stop is not None and not self._stop.is_set()

    def start(self, interval: float | None = None) -> None:
        """Start calling, unless already running; a shorter ``interval`` cuts the current wait."""
        with self._lock:
            if interval is not None:
                shorter = interval < self.interval
                self.interval = interval
                if shorter and self._stop is not None:
                    self._stop.set()  # the old thread ends; a new one waits the new interval
            if self.running or self._closed:
                return
            stop = threading.Event()
            self._stop = stop
            threading.Thread(target=self._loop, args=(stop,), name=self._name, daemon=True).start()

    def _loop(self, stop: threading.Event) -> None:
        while not stop.wait(self.interval):
            function = self._function()
            if function is None:  # its widget was garbage-collected
                stop.set()
                return
            try:
                function()
            except Exception:
                log.debug("A periodic widget refresh failed", exc_info=True)
            del function  # hold the widget only while calling it

    def stop(self) -> None:
        """Stop calling (a call in progress finishes)."""
        with self._lock:
            if self._stop is not None:
                self._stop.set()

    def close(self) -> None:
        """Stop for good: a later :meth:`start` (say, from a refresh still running) does nothing."""
        with self._lock:
            self._closed = True
        self.stop()


# --------------------------------------------------------------------------- formatting


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


# --------------------------------------------------------------------------- widget plumbing


def show(widget: widgets.Widget, visible: bool = True) -> None:
    """Show or hide a widget (it keeps its state while hidden)."""
    widget.layout.display = None if visible else "none"


MAX_FAILURES = 3


class RefreshTicks:
    """The tick of a panel that refreshes itself through a :class:`Repeater` (``_poller``):
    after :data:`MAX_FAILURES` failed refreshes in a row it stops, and its status line says so
    (the failure itself is already there, from ``refresh``)."""

    _poller: Repeater
    _failures: int = 0
    status: StatusLine

    def refresh(self) -> Any:
        raise NotImplementedError

    def _tick(self) -> None:
        try:
            self.refresh()
        except Exception:
            self._failures += 1
            if self._failures >= MAX_FAILURES:
                self._poller.stop()
                self.status.error(f"Auto-refresh stopped after {MAX_FAILURES} failed refreshes; "
                                  "press Refresh to try again.")
        else:
            self._failures = 0


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


def escape(value: Any) -> str:
    """Text from the server, safe inside HTML."""
    return html.escape("" if value is None else str(value))


def join_nonempty(parts: Iterable[str], separator: str = " · ") -> str:
    """Join the non-empty parts."""
    return separator.join(part for part in parts if part)


# --------------------------------------------------------------------------- tables


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
