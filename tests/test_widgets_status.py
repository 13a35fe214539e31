"""The widgets' status line and error sentences (:mod:`gpucloud_nb.widgets._status`)."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import ipywidgets as widgets
import pytest

import gpucloud_nb.widgets as widget_package
from gpucloud_nb.errors import InvalidInputError, NotFoundError
from gpucloud_nb.widgets._status import StatusLine, describe_error, guarded


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
