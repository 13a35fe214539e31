"""The chat panel's widgets, their layout and what they hold (model, system prompt, temperature,
max tokens, the text box), without behaviour (:class:`ChatWidget` adds it).

    >>> fields = ChatFields(system_prompt="", temperature=0.7, max_tokens=None)  # doctest: +SKIP
    >>> fields.status  # doctest: +SKIP
"""

from __future__ import annotations

import html
from typing import Any

import ipywidgets as widgets
from ipywidgets.widgets.widget_string import HTMLStyle

from gpucloud_nb.widgets._chat_follow import FollowBottom
from gpucloud_nb.widgets._chat_input import ChatInput
from gpucloud_nb.widgets._chat_style import CSS_CLASSES, STYLE_SHEET
from gpucloud_nb.widgets._status import StatusLine

__all__ = ["UPLOAD_HINT", "ChatFields"]

UPLOAD_HINT = ("Uploads travel over the notebook's websocket, which Jupyter servers cap at about "
               "10 MB by default (Binder, JupyterLab); for a larger image use chat.attach(path).")


class ChatFields(widgets.VBox):
    """Every widget of the chat panel, built and laid out; the panel wires them."""

    def __init__(self, *, system_prompt: str, temperature: float, max_tokens: int | None,
                 **kwargs: Any) -> None:
        self._block_layout = widgets.Layout()
        self._block_style = HTMLStyle()
        self._box_layout = widgets.Layout()

        self._style = widgets.HTML(STYLE_SHEET, _dom_classes=(CSS_CLASSES["style"],))
        self._model = widgets.Dropdown(description="Model", options=[],
                                       _dom_classes=(CSS_CLASSES["model"],),
                                       style={"description_width": "initial"})
        self._temperature = widgets.BoundedFloatText(
            value=float(temperature), min=0.0, max=2.0, step=0.1, description="Temperature",
            _dom_classes=(CSS_CLASSES["temperature"],), style={"description_width": "initial"},
            layout=widgets.Layout(width="170px"))
        self._max_tokens = widgets.BoundedIntText(
            value=int(max_tokens or 0), min=0, max=1_000_000, description="Max tokens (0 = no limit)",
            _dom_classes=(CSS_CLASSES["max_tokens"],),
            style={"description_width": "initial"}, layout=widgets.Layout(width="260px"))
        self._clear_button = widgets.Button(description="Clear", icon="trash",
                                            tooltip="Forget the conversation",
                                            _dom_classes=(CSS_CLASSES["clear"],),
                                            layout=widgets.Layout(width="auto"))
        self._system = widgets.Textarea(value=system_prompt, placeholder="System prompt (optional)",
                                        rows=2, _dom_classes=(CSS_CLASSES["system"],))
        self._messages = widgets.VBox([], _dom_classes=(CSS_CLASSES["messages"],))
        self._attachments = widgets.HBox([], _dom_classes=(CSS_CLASSES["attachments"],))
        self._input = ChatInput(placeholder="Message — Enter sends, Shift+Enter adds a line",
                                _dom_classes=(CSS_CLASSES["input"],),
                                layout=widgets.Layout(flex="1 1 auto", width="auto"))
        self._send_button = widgets.Button(description="Send", button_style="primary", icon="paper-plane",
                                           _dom_classes=(CSS_CLASSES["send"],),
                                           layout=widgets.Layout(width="auto"))
        self._stop_button = widgets.Button(description="Stop", icon="stop", disabled=True,
                                           _dom_classes=(CSS_CLASSES["stop"],),
                                           layout=widgets.Layout(width="auto"))
        self._image_upload = widgets.FileUpload(accept="image/*", multiple=True, description="Image",
                                                _dom_classes=(CSS_CLASSES["upload_image"],))
        self._audio_upload = widgets.FileUpload(accept="audio/*", multiple=False, description="Audio",
                                                _dom_classes=(CSS_CLASSES["upload_audio"],))
        self._audio_sends = widgets.Checkbox(value=False, description="Send transcript as a message",
                                             indent=False, _dom_classes=(CSS_CLASSES["audio_send"],),
                                             layout=widgets.Layout(width="auto"))
        self._hint = widgets.HTML(f"<small>{html.escape(UPLOAD_HINT)}</small>",
                                  _dom_classes=(CSS_CLASSES["upload_hint"],))
        self.status = StatusLine(CSS_CLASSES["status"])

        self._input_row = widgets.HBox([self._input, self._send_button, self._stop_button])
        settings = widgets.HBox([self._model, self._temperature, self._max_tokens,
                                 self._clear_button], layout=widgets.Layout(flex_flow="row wrap"))
        uploads = widgets.HBox([self._image_upload, self._audio_upload, self._audio_sends],
                               layout=widgets.Layout(flex_flow="row wrap"))
        super().__init__([self._style, FollowBottom(), settings, self._system, self._messages,
                          self._attachments, self._input_row, uploads, self._hint, self.status],
                         **kwargs)
        self.add_class(CSS_CLASSES["root"])

    # ------------------------------------------------------------------ what the fields hold

    @property
    def model(self) -> str | None:
        """The model chosen in the picker."""
        return self._model.value

    @model.setter
    def model(self, value: str) -> None:
        if value not in self._model.options:
            self._model.options = [*self._model.options, value]
        self._model.value = value

    @property
    def system_prompt(self) -> str:
        return self._system.value

    @system_prompt.setter
    def system_prompt(self, value: str) -> None:
        self._system.value = value

    @property
    def temperature(self) -> float:
        return self._temperature.value

    @temperature.setter
    def temperature(self, value: float) -> None:
        self._temperature.value = value

    @property
    def max_tokens(self) -> int | None:
        return self._max_tokens.value or None

    @max_tokens.setter
    def max_tokens(self, value: int | None) -> None:
        self._max_tokens.value = int(value or 0)

    @property
    def input_text(self) -> str:
        """What the text box holds."""
        return self._current_input().value

    @input_text.setter
    def input_text(self, value: str) -> None:
        self._current_input().value = value

    def _current_input(self) -> ChatInput:
        return self._input
