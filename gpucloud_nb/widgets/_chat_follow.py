"""Keeps the chat transcript's newest message in view, unless the reader scrolled up.

The kernel cannot scroll a browser element, so this is a tiny anywidget with no look of its
own: its front-end view finds the transcript of the panel it sits in and, while the reader is at
the bottom (within a few pixels), scrolls it to the bottom whenever messages arrive, grow while
streaming, or an image loads. Scrolling up stops the following; scrolling back to the bottom
resumes it. Only a move up stops it: a scroll event that arrives after the transcript grew again
(our own scroll, then an image laid out) leaves the following on. Nothing is synced but the widget's own code.

    >>> FollowBottom().layout.display
    'none'
"""

from __future__ import annotations

from typing import Any

import anywidget
import ipywidgets as widgets
import traitlets

__all__ = ["FollowBottom"]

_ESM = """
const SLACK = 24;  // px from the bottom that still count as "at the bottom"

function follow(box) {
  let stuck = true;
  let last = box.scrollTop;
  const atBottom = () => box.scrollHeight - box.scrollTop - box.clientHeight <= SLACK;
  const stick = () => { if (stuck) box.scrollTop = box.scrollHeight; };
  // Only the reader moving up stops the following. A scroll event may arrive after the
  // transcript grew again (an image laid out, a reply's first words): judged by "at the
  // bottom" alone, our own scroll would look like the reader's and stop it for good.
  box.addEventListener("scroll", () => {
    if (box.scrollTop < last - 1) {
      stuck = atBottom();
    } else if (atBottom()) {
      stuck = true;
    }
    last = box.scrollTop;
  }, { passive: true });
  box.addEventListener("load", stick, true);  // an image arrived: the transcript grew
  const sizes = new ResizeObserver(stick);
  const watch = () => { for (const child of box.children) sizes.observe(child); };
  new MutationObserver(() => { watch(); stick(); })
    .observe(box, { childList: true, subtree: true, characterData: true });
  watch();
  stick();
}

function render({ el }) {
  let tries = 0;
  const find = () => {  // the view is put in the page after render returns
    const root = el.closest(".gpucloud-chat");
    const box = root && root.querySelector(".gpucloud-chat-messages");
    if (box && !box.dataset.gpucloudFollowing) {
      box.dataset.gpucloudFollowing = "1";
      follow(box);
    } else if (!box && tries++ < 200) {
      setTimeout(find, 50);
    }
  };
  find();
}
export default { render };
"""


class FollowBottom(anywidget.AnyWidget):
    """Put inside a chat panel: its transcript follows the newest message (see the module)."""

    _esm = traitlets.Unicode(_ESM).tag(sync=True)

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("layout", widgets.Layout(display="none"))
        super().__init__(**kwargs)
