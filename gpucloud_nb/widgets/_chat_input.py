"""The chat's message box: Enter sends, Shift+Enter starts a new line.

The kernel cannot tell Enter from Shift+Enter (both put a newline in a Textarea), so the box is a
tiny anywidget whose front-end view handles the key and sends ``{"event": "submit", "value":
text}``. It is a proper widget module, not HTML injected into the page, and its value syncs like
any widget's. Enter keys stop at the box, so JupyterLab's Shift+Enter (run cell) does not fire
while typing.

The submit carries the text, and the view empties the box as it sends: ipywidgets holds back a
model's state updates while one is unanswered (a busy kernel) but not custom messages, so a
submit could overtake the last keystrokes, and the kernel would send a message cut short. Held
back updates merge, so the kernel then only ever sees the empty box. A refused message comes
back (``{"do": "restore", "value": text}``) into a box still empty.

The Send button always works too.

    >>> box = ChatInput(placeholder="Message")
    >>> box.on_msg(lambda widget, content, buffers: print(content))   # {'event': 'submit', ...}
"""

from __future__ import annotations

import anywidget
import traitlets

__all__ = ["ChatInput"]

_ESM = """
function render({ model, el }) {
  const box = document.createElement("textarea");
  box.className = "gpucloud-chat-textarea";
  box.rows = 2;
  box.placeholder = model.get("placeholder");
  box.value = model.get("value");
  const push = () => { model.set("value", box.value); model.save_changes(); };
  box.addEventListener("input", push);
  box.addEventListener("keydown", (event) => {
    if (event.key !== "Enter") return;
    // JupyterLab handles shortcuts as keydown bubbles up: keep Shift+Enter from running the cell.
    event.stopPropagation();
    if (!event.shiftKey && !event.isComposing) {
      event.preventDefault();
      const text = box.value;
      box.value = "";
      push();
      model.send({ event: "submit", value: text });
    }
  });
  model.on("change:value", () => {
    if (box.value !== model.get("value")) box.value = model.get("value");
  });
  model.on("change:placeholder", () => { box.placeholder = model.get("placeholder"); });
  model.on("msg:custom", (message) => {
    if (message && message.do === "focus") box.focus();
    if (message && message.do === "restore" && !box.value) {
      box.value = message.value;
      push();
    }
  });
  el.appendChild(box);
}
export default { render };
"""

_CSS = """
.gpucloud-chat-textarea {
  width: 100%; min-height: 2.6em; box-sizing: border-box; resize: vertical;
  font: inherit; padding: 4px 6px; border: 1px solid var(--jp-border-color1);
  border-radius: 2px; background: var(--jp-layout-color1); color: var(--jp-ui-font-color1);
}
"""


class ChatInput(anywidget.AnyWidget):
    """A text box for chat messages: Enter sends (a ``submit`` message), Shift+Enter adds a line."""

    _esm = traitlets.Unicode(_ESM).tag(sync=True)
    _css = traitlets.Unicode(_CSS).tag(sync=True)
    value = traitlets.Unicode("").tag(sync=True)
    placeholder = traitlets.Unicode("").tag(sync=True)
