"""Widget plumbing (:mod:`gpucloud_nb.widgets._layout`) and the package's lazy imports."""

from __future__ import annotations

import sys
import types

import ipywidgets as widgets
import pytest

import gpucloud_nb.widgets as widget_package
from gpucloud_nb.widgets._layout import iter_widgets


def test_iter_widgets_walks_children() -> None:
    leaf = widgets.Text()
    root = widgets.VBox([widgets.HBox([leaf])])
    found = list(iter_widgets(root))
    assert leaf in found and root in found and root.layout in found


def test_chat_widget_is_loaded_lazily(monkeypatch) -> None:
    assert "ChatWidget" in dir(widget_package)
    fake = types.ModuleType("gpucloud_nb.widgets.chat")
    fake.ChatWidget = type("ChatWidget", (), {})
    monkeypatch.setitem(sys.modules, "gpucloud_nb.widgets.chat", fake)
    assert widget_package.ChatWidget is fake.ChatWidget
    with pytest.raises(AttributeError):
        widget_package.NoSuchWidget  # noqa: B018
