"""The widgets' shared helpers: status line, guards, background work, debounce, formatting."""

from __future__ import annotations

import logging
import re
import sys
import threading
import time
import types
from pathlib import Path

import ipywidgets as widgets
import pandas as pd
import pytest
from helpers import wait_for

import gpucloud_nb.widgets as widget_package
from gpucloud_nb.errors import InvalidInputError, NotFoundError
from gpucloud_nb.widgets._background import Debouncer, Repeater, settle
from gpucloud_nb.widgets._dropdowns import set_options
from gpucloud_nb.widgets._format import frame_html, money, per_day, per_hour
from gpucloud_nb.widgets._layout import iter_widgets
from gpucloud_nb.widgets._status import StatusLine, describe_error, guarded

# errors and the status line ------------------------------------------------------------------


def test_describe_error_keeps_our_sentences_and_labels_the_unexpected(caplog) -> None:
    assert describe_error(NotFoundError("Volume v1 not found.", status_code=404)) == \
        "Volume v1 not found."
    with caplog.at_level(logging.DEBUG, logger="gpucloud_nb.widgets"):
        text = describe_error(ValueError("boom\nsecond line"))
    assert text == "Something went wrong: ValueError: boom"
    assert "Traceback" not in text
    assert "ValueError: boom" in caplog.text  # the traceback, scrubbed, as text
    with caplog.at_level(logging.DEBUG, logger="gpucloud_nb.widgets"):
        text = describe_error(RuntimeError("refused isk-0123456789abcdef-9876 at "
                                           "http://bob:hunter22@127.0.0.1:9/v1"),
                              "isk-0123456789abcdef-9876")
    assert text == "Something went wrong: RuntimeError: refused isk…9876 at http://***@127.0.0.1:9/v1"
    assert "0123456789abcdef" not in caplog.text and "hunter22" not in caplog.text
    assert describe_error(KeyError()) == "Something went wrong: KeyError."


def test_status_line_shows_escaped_sentences_and_marks_errors() -> None:
    status = StatusLine("gpucloud-test-status")
    assert {"gpucloud-status", "gpucloud-test-status"} <= set(status._dom_classes)
    status.error(InvalidInputError("Bad <b>name</b>."))
    assert status.is_error and status.text == "Bad <b>name</b>."
    assert "gpucloud-error" in status._dom_classes
    assert "&lt;b&gt;" in status.value and "<b>" not in status.value
    status.success("Done.")
    assert not status.is_error and "gpucloud-error" not in status._dom_classes
    status.clear()
    assert status.value == "" and status.text == ""


@pytest.mark.parametrize(("kind", "variable"), [
    ("info", "--jp-ui-font-color2"), ("success", "--jp-success-color0"),
    ("warning", "--jp-warn-color0"), ("error", "--jp-error-color1")])
def test_status_colours_are_theme_variables(kind: str, variable: str) -> None:
    status = StatusLine()
    getattr(status, kind)("Something.")
    assert f"var({variable})" in status.value
    assert not re.search(r"#[0-9a-fA-F]{3,6}\b|rgb\(", status.value)


def test_no_widget_module_has_a_fixed_colour() -> None:
    """Light and dark themes alike: every colour is a JupyterLab variable (no hex, no rgb())."""
    folder = Path(widget_package.__file__).parent
    for module in sorted(folder.glob("*.py")):
        fixed = re.findall(r"#[0-9a-fA-F]{6}\b|#[0-9a-fA-F]{3}\b(?![-\w])|rgba?\(",
                           module.read_text(encoding="utf-8"))
        assert fixed == [], module.name


def test_tables_border_in_a_theme_colour() -> None:
    html = frame_html(pd.DataFrame({"a": [1]}))
    assert "var(--jp-border-color2)" in html and "#ccc" not in html


def test_guarded_handlers_never_raise() -> None:
    status = StatusLine()

    def handler(_: object) -> None:
        raise RuntimeError("kaput")

    assert guarded(status, handler)(None) is None
    assert status.text == "Something went wrong: RuntimeError: kaput"
    button = widgets.Button()
    button.on_click(guarded(status, lambda _: (_ for _ in ()).throw(InvalidInputError("No."))))
    button.click()
    assert status.text == "No."


# background work -----------------------------------------------------------------------------


def test_debouncer_immediate_and_coalescing() -> None:
    calls: list[float] = []
    now = Debouncer(0, lambda: calls.append(time.monotonic()))
    now()
    assert len(calls) == 1

    calls.clear()
    later = Debouncer(0.05, lambda: calls.append(time.monotonic()))
    for _ in range(5):
        later()
    assert later.pending and calls == []
    wait_for(lambda: len(calls) == 1)
    time.sleep(0.1)
    assert len(calls) == 1 and not later.pending

    slow = Debouncer(30, lambda: calls.append(0.0))
    slow()
    slow.flush()
    assert len(calls) == 2 and not slow.pending
    slow()
    slow.cancel()
    assert not slow.pending and len(calls) == 2


def test_repeater_runs_until_stopped_and_restarts() -> None:
    ticks = []
    event = threading.Event()

    def tick() -> None:
        ticks.append(1)
        if len(ticks) >= 3:
            event.set()

    repeater = Repeater(0.01, tick)
    repeater.start()
    repeater.start()  # no second thread
    assert repeater.running and event.wait(2)
    repeater.stop()
    assert not repeater.running
    count = len(ticks)
    time.sleep(0.05)
    assert len(ticks) <= count + 1
    repeater.start()
    wait_for(lambda: len(ticks) > count + 1)
    repeater.stop()


# formatting and plumbing ---------------------------------------------------------------------


def test_money() -> None:
    assert money(2.49) == "$2.49" and money(None) == ""
    assert per_hour(2.49) == "$2.49/h"
    assert per_day(2.49) == "$59.76/day"
    assert per_hour(0.00014) == "$0.00014/h"


def test_set_options_keeps_the_choice() -> None:
    dropdown = widgets.Dropdown(options=[("a", 1), ("b", 2)], value=2)
    set_options(dropdown, [("c", 3), ("b", 2)])
    assert dropdown.value == 2
    set_options(dropdown, [("x", 9), ("y", 8)], 8)
    assert dropdown.value == 8
    set_options(dropdown, [])
    set_options(dropdown, [("z", 7)])
    assert dropdown.value == 7


def test_frame_html_escapes_text_and_formats_prices() -> None:
    frame = pd.DataFrame({"gpuName": ["<script>x</script>"], "hourlyPrice": [2.49],
                          "available": [True], "vRamGB": [80.0]})
    page = frame_html(frame, price_columns=["hourlyPrice"], table_class="t")
    assert "&lt;script&gt;" in page and "<script>" not in page
    assert "$2.49" in page and ">yes<" in page and ">80<" in page and 'class="t"' in page


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


def test_choose_selects_none_options_visibly() -> None:
    from gpucloud_nb.errors import InvalidInputError
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
    from gpucloud_nb.widgets._layout import iter_widgets

    cloud = GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url)
    built = [OffersBrowser(cloud, debounce=0), LaunchForm(cloud), InstancesPanel(cloud)]
    dropdowns = [w for root in built for w in iter_widgets(root) if isinstance(w, widgets.Dropdown)]
    assert len(dropdowns) >= 8
    assert [d.description for d in dropdowns if d.options and d.index is None] == []
    for root in built:
        root.close()


def test_settle_resolves_once_and_lets_bugs_surface() -> None:
    from concurrent.futures import Future

    future: Future[int] = Future()
    assert settle(future, 1) is True
    assert settle(future, error=ValueError("late")) is False  # a stop won the race: fine
    assert future.result() == 1
    with pytest.raises(AttributeError):  # not a Future at all: a bug, not a race
        settle(None, 1)  # type: ignore[arg-type]
