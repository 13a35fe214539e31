"""ipywidgets UIs for the GPU cloud: browse offers, launch instances, manage them, chat.

    >>> from gpucloud_nb.widgets import OffersBrowser, LaunchForm, InstancesPanel
    >>> OffersBrowser(cloud)          # the last expression of a cell displays the widget  # doctest: +SKIP

Every widget works from code as well as by clicking, shows errors as one sentence in its own
status line, never holds the API key in any widget state, and exposes stable CSS classes (listed
in each class docstring) for browser tests. Widgets talk to the cloud only through
:mod:`gpucloud_nb.client`.

``ChatWidget`` is loaded on first use from :mod:`gpucloud_nb.widgets.chat`.
"""

from __future__ import annotations

from typing import Any

from gpucloud_nb.errors import WaitStopped
from gpucloud_nb.widgets.class_panel import ClassPanel
from gpucloud_nb.widgets.instances_panel import InstancesPanel
from gpucloud_nb.widgets.launch_form import LaunchForm
from gpucloud_nb.widgets.offers_browser import OffersBrowser

__all__ = ["ClassPanel", "InstancesPanel", "LaunchForm", "OffersBrowser", "WaitStopped"]

_LAZY = {"ChatWidget": "gpucloud_nb.widgets.chat",
         "DeployForm": "gpucloud_nb.widgets.deploy_form"}


def __getattr__(name: str) -> Any:
    """Import lazily-loaded widgets (``ChatWidget``) on first access."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
