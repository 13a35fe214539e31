"""The widgets' status line and error sentences: one sentence on screen, the traceback of the
unexpected in the debug log, colours from the JupyterLab theme.

    >>> status = StatusLine("gpucloud-launch-status")
    >>> status.error(InvalidInputError("Give the instance a name."))
    >>> status.text, status.is_error
    ('Give the instance a name.', True)

Choices, written down once:

- A user error is the ``str`` of a :class:`~gpucloud_nb.errors.GPUCloudError` (one sentence);
  anything else is "Something went wrong: <ExceptionType>: <message>", and its traceback goes to
  the ``gpucloud_nb.widgets`` logger at debug level, never to the screen.
- Every colour is a JupyterLab CSS variable (``--jp-ui-font-color2`` for hints, the accent
  colours through :func:`tone` for warnings, errors and success), never a fixed hex value, so
  the widgets read well in the light and the dark theme alike.
"""

from __future__ import annotations

import functools
import html
import logging
from collections.abc import Callable
from typing import Any, TypeVar

import ipywidgets as widgets

from gpucloud_nb._secrets import scrub, scrub_exception
from gpucloud_nb.errors import GPUCloudError, InvalidInputError  # noqa: F401 (the doctest)

__all__ = ["ERROR", "HINT", "SUCCESS", "WARNING", "StatusLine", "describe_error", "guarded",
           "hint", "log", "tone"]


log = logging.getLogger("gpucloud_nb.widgets")


T = TypeVar("T")


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
