"""A streamed reply on screen: Markdown rendered block by block, only the open block re-sent.

Few, small updates. Streamed text is buffered and shown at most 10 times a second, and
less often while the open block is long (about ``FLUSH_BYTES_PER_SECOND`` re-sent characters
a second, and never more than ``FLUSH_MAX_INTERVAL`` late). A streamed reply is one message
box holding ``HTML`` block widgets: a block is cut at a Markdown block boundary (see
:class:`~gpucloud_nb.widgets._markdown.MarkdownStream`), rendered one last time and then
frozen, so an update re-sends only the open block, never the whole reply or conversation.
A finished message is never updated again. Stop closes the stream, keeps what arrived and
marks it ``[stopped]``.

    >>> view = ReplyView(widgets.Layout(), HTMLStyle(), widgets.Layout())  # doctest: +SKIP
    >>> view.append("Hello **world**"); view.flush(); view.finish()  # doctest: +SKIP
"""

from __future__ import annotations

import html

import ipywidgets as widgets
from ipywidgets.widgets.widget_string import HTMLStyle
from traitlets import Any as TraitAny
from traitlets import Bool, Unicode

from gpucloud_nb.conversation import Attachment
from gpucloud_nb.widgets._chat_style import CSS_CLASSES, GROUP_SIZE
from gpucloud_nb.widgets._markdown import MarkdownStream, render_markdown
from gpucloud_nb.widgets._throttle import Throttle

__all__ = ["FLUSH_BYTES_PER_SECOND", "FLUSH_INTERVAL", "FLUSH_MAX_INTERVAL", "Block", "ErrorLine",
           "ReplyView", "notice", "paced", "user_message"]

FLUSH_INTERVAL = 0.1
"""Shortest time between two updates of a streaming reply: at most 10 updates a second."""

FLUSH_BYTES_PER_SECOND = 4000
"""About how many characters a second the streaming reply's updates may re-send.

Each update re-sends the open block; when it is long, updates come less often (at most
``FLUSH_MAX_INTERVAL`` apart), which keeps a fast reply's traffic near 2-3 times its length."""

FLUSH_MAX_INTERVAL = 0.5
"""Longest time new text waits before it is shown."""


class Block(widgets.HTML):
    """An ``HTML`` widget that syncs only ``value``, classes, layout and style.

    A streamed reply opens one of these per segment; leaving out the description, placeholder
    and tooltip traits (the front end's defaults are the same) makes each opening about 150
    bytes smaller.
    """

    description = Unicode("").tag(sync=False)
    description_allow_html = Bool(False).tag(sync=False)
    placeholder = Unicode("\u200b").tag(sync=False)
    tabbable = TraitAny(None).tag(sync=False)
    tooltip = TraitAny(None).tag(sync=False)


class _Group(widgets.VBox):
    """A ``VBox`` that syncs only its children, classes and layout (see :class:`Block`)."""

    box_style = Unicode("").tag(sync=False)
    tabbable = TraitAny(None).tag(sync=False)
    tooltip = TraitAny(None).tag(sync=False)



class ReplyView:
    """The assistant message being streamed.

    The reply's Markdown is cut into segments (:class:`MarkdownStream`): the segments that can
    no longer change by a flush are each rendered once, into that flush's own ``HTML`` widget,
    which is never touched again; only the last widget (the open tail, capped in size) is
    re-rendered, at most ``1 / FLUSH_INTERVAL`` times a second. So each update sends the tail,
    not the whole reply, let alone the conversation, and costs the same however long the reply.
    Segment widgets sit in sub-boxes of ``GROUP_SIZE`` so that adding one re-sends a short
    ``children`` list. All block widgets share one layout and one style model.
    """

    def __init__(self, layout: widgets.Layout, style: HTMLStyle, box_layout: widgets.Layout) -> None:
        self._layout, self._style, self._box_layout = layout, style, box_layout
        self.markdown = MarkdownStream(min_chars=600, max_chars=1200)
        self._ready: list[str] = []  # HTML of pieces frozen between two flushes
        self.blocks: list[widgets.HTML] = []
        self.tail = self._block("")
        self._group = _Group([self.tail], layout=box_layout)
        self.box = widgets.VBox([self._group], layout=box_layout)
        for css in ("message", "assistant", "streaming"):
            self.box.add_class(CSS_CLASSES[css])
        self.updates = 0

    def _block(self, value: str) -> widgets.HTML:
        block = Block(value=value, layout=self._layout, style=self._style)
        self.blocks.append(block)
        return block

    @property
    def text(self) -> str:
        return self.markdown.text

    def append(self, delta: str) -> None:
        """Add text; past a few blocks' worth, freeze what can be frozen now (shown at the next
        flush), so neither a flush nor the last update after Stop has a backlog to work off."""
        self.markdown.append(delta)
        if self.markdown.tail_chars > 4 * self.markdown.max_chars:
            self._ready.extend(render_markdown(piece) for piece in iter(self.markdown.settle, ""))

    def cost(self) -> float:
        """About what the next update sends: the open tail's length."""
        return self.markdown.tail_chars

    def _frozen(self) -> str:
        """The HTML of every piece that can no longer change (``""``: none), each rendered once."""
        self._ready.extend(render_markdown(piece) for piece in iter(self.markdown.settle, ""))
        ready, self._ready = "".join(self._ready), []
        return ready

    def _freeze(self, frozen: str) -> None:
        self._set(self.tail, frozen)  # its last update, ever
        self.tail = self._block("")
        if len(self._group.children) >= GROUP_SIZE:
            self._group = _Group([self.tail], layout=self._box_layout)
            self.box.children = (*self.box.children, self._group)
        else:
            self._group.children = (*self._group.children, self.tail)

    def flush(self) -> None:
        """Show what arrived: freeze the finished pieces, re-render the open tail.

        The tail is capped (see :class:`MarkdownStream`), so a flush costs the same at the
        first kilobyte of a reply and at the last megabyte.
        """
        frozen = self._frozen()
        if frozen:
            self._freeze(frozen)
        self._set(self.tail, render_markdown(self.markdown.tail))

    def _set(self, block: widgets.HTML, value: str) -> None:
        if block.value != value:
            self.updates += 1
            block.value = value

    def finish(self, marker: str | None = None) -> None:
        """The last update: the rest of the text (and ``[stopped]``); then nothing changes."""
        self.markdown.finish()
        frozen = self._frozen()
        if frozen:
            self._freeze(frozen)
        value = render_markdown(self.markdown.tail)
        if marker:
            value += f'<p class="{CSS_CLASSES["stopped"]}">{html.escape(marker)}</p>'
        elif not self.markdown.text.strip():
            value = "<p><em>(no reply)</em></p>"
        self._set(self.tail, value)
        self.box.remove_class(CSS_CLASSES["streaming"])


# --------------------------------------------------------------------------- the widget


class ErrorLine(widgets.HTML):
    """An error line in the message list (the panel's ``errors`` finds them by their class)."""


def notice(text: str) -> widgets.HTML:
    """A short assistant-side note, such as ``[stopped]`` for a reply that never started."""
    return widgets.HTML(f'<p class="{CSS_CLASSES["stopped"]}">{html.escape(text)}</p>',
                        _dom_classes=(CSS_CLASSES["message"], CSS_CLASSES["assistant"]))


def user_message(text: str, attachments: list[Attachment], block_layout: widgets.Layout,
                 block_style: HTMLStyle, box_layout: widgets.Layout) -> widgets.Widget:
    """The user's message as shown: its Markdown, then a thumbnail per image."""
    children: list[widgets.Widget] = []
    if text.strip():
        children.append(Block(value=render_markdown(text), layout=block_layout, style=block_style))
    thumbs = []
    for attachment in attachments:
        if attachment.thumbnail is not None:
            thumbs.append(widgets.Image(value=attachment.thumbnail,
                                        format=attachment.thumbnail_format,
                                        layout=widgets.Layout(max_width="96px")))
        else:
            thumbs.append(widgets.HTML(f"<small>[image: {html.escape(attachment.note)}]</small>"))
    if thumbs:
        children.append(widgets.HBox(thumbs))
    box = widgets.VBox(children, layout=box_layout)
    box.add_class(CSS_CLASSES["message"])
    box.add_class(CSS_CLASSES["user"])
    return box


def paced(reply: ReplyView) -> Throttle:
    """The throttle that shows ``reply``'s new text at the pace the module docstring describes."""
    return Throttle(FLUSH_INTERVAL, reply.flush, cost=reply.cost,
                    bytes_per_second=FLUSH_BYTES_PER_SECOND, max_interval=FLUSH_MAX_INTERVAL)
