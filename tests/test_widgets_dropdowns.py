"""Dropdowns that keep the choice (:mod:`gpucloud_nb.widgets._dropdowns`)."""

from __future__ import annotations

import ipywidgets as widgets
import pytest

from gpucloud_nb.errors import InvalidInputError
from gpucloud_nb.widgets._dropdowns import set_options
from gpucloud_nb.widgets._layout import iter_widgets


def test_set_options_keeps_the_choice() -> None:
    dropdown = widgets.Dropdown(options=[("a", 1), ("b", 2)], value=2)
    set_options(dropdown, [("c", 3), ("b", 2)])
    assert dropdown.value == 2
    set_options(dropdown, [("x", 9), ("y", 8)], 8)
    assert dropdown.value == 8
    set_options(dropdown, [])
    set_options(dropdown, [("z", 7)])
    assert dropdown.value == 7


def test_choose_selects_none_options_visibly() -> None:
    from gpucloud_nb.widgets._dropdowns import choose, set_options

    dropdown = widgets.Dropdown(options=[("any", None), ("eu", "eu-1")], description="Region")
    choose(dropdown, "eu-1")
    choose(dropdown, None)
    assert (dropdown.index, dropdown.value, dropdown.label) == (0, None, "any")
    choose(dropdown, "mars", "{} (no offers)")
    assert dropdown.label == "mars (no offers)"
    with pytest.raises(InvalidInputError, match="not one of the choices for Region"):
        choose(dropdown, "venus")
    set_options(dropdown, [("any", None), ("us", "us-1")], None, keep=False)
    assert dropdown.index == 0 and dropdown.label == "any"


def test_no_dropdown_of_the_widgets_shows_blank(sandbox) -> None:
    from gpucloud_nb import GPUCloud
    from gpucloud_nb.widgets import InstancesPanel, LaunchForm, OffersBrowser

    cloud = GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url)
    built = [OffersBrowser(cloud, debounce=0), LaunchForm(cloud), InstancesPanel(cloud)]
    dropdowns = [w for root in built for w in iter_widgets(root) if isinstance(w, widgets.Dropdown)]
    assert len(dropdowns) >= 8
    assert [d.description for d in dropdowns if d.options and d.index is None] == []
    for root in built:
        root.close()
