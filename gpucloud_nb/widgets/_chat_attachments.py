"""The chat panel's images waiting to go with the next message: thumbnails with a × to drop one,
and the upload button's count.

The images are checked (:func:`~gpucloud_nb.conversation.make_attachment`) before they are
added here; the bytes stay in the kernel. The upload button reads "Image (n)" for the n files of
its value, so its value is made of one contentless entry per attachment waiting (marked, so the
panel's upload observer knows them from a real upload).

    >>> waiting = PendingImages(upload, box, shared=())  # doctest: +SKIP
    >>> waiting.add(make_attachment("red.png")); waiting.notes  # doctest: +SKIP
    ['64×64 PNG']
    >>> waiting.take()     # for the message being sent; none left waiting  # doctest: +SKIP
"""

from __future__ import annotations

import html
import threading
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from typing import Any

import ipywidgets as widgets

from gpucloud_nb.conversation import Attachment
from gpucloud_nb.widgets._chat_style import CSS_CLASSES
from gpucloud_nb.widgets._layout import close_tree

__all__ = ["PendingImages", "is_count_entry"]

_COUNTED = "gpucloud_attached"  # marks the upload button's entries that only count attachments
_EPOCH = datetime.fromtimestamp(0, timezone.utc)


def is_count_entry(item: Mapping[str, Any]) -> bool:
    """True for an upload button entry that only counts an attachment (no upload of its own)."""
    return bool(item.get(_COUNTED))


class PendingImages:
    """The images waiting for the next message, shown in ``box`` and counted on ``upload``."""

    def __init__(self, upload: widgets.FileUpload, box: widgets.Box,
                 shared: Iterable[widgets.Widget]) -> None:
        self._upload = upload
        self._box = box
        self._shared = tuple(shared)  # layouts and styles the thumbnails share: never closed
        self._pending: list[Attachment] = []
        self._lock = threading.RLock()

    @property
    def notes(self) -> list[str]:
        """A note per image waiting ("64×64 PNG", an address)."""
        with self._lock:
            return [attachment.note for attachment in self._pending]

    def add(self, attachment: Attachment) -> None:
        """Add a checked image."""
        with self._lock:
            self._pending.append(attachment)
        self.show()

    def clear(self) -> None:
        """Drop every image waiting."""
        with self._lock:
            self._pending.clear()
        self.show()

    def take(self, extra: Iterable[Attachment] = ()) -> list[Attachment]:
        """The images waiting, then ``extra``; none is left waiting (shown at the next
        :meth:`show`)."""
        with self._lock:
            taken = [*self._pending, *extra]
            self._pending.clear()
        return taken

    def show(self) -> None:
        """Show the thumbnails and make the upload button count them."""
        with self._lock:
            pending = list(self._pending)
        self._upload.value = tuple(
            {"name": a.note, "type": "", "size": 0, "content": memoryview(b""),
             "last_modified": _EPOCH, _COUNTED: True} for a in pending)
        old = self._box.children
        self._box.children = tuple(self._widget(a) for a in pending)
        for child in old:
            close_tree(child, self._shared)

    def _widget(self, attachment: Attachment) -> widgets.Widget:
        if attachment.thumbnail is not None:
            preview: widgets.Widget = widgets.Image(value=attachment.thumbnail,
                                                    format=attachment.thumbnail_format,
                                                    layout=widgets.Layout(max_width="64px",
                                                                          max_height="64px"))
        else:
            preview = widgets.HTML(f"<small>{html.escape(attachment.note[:40])}</small>")
        remove = widgets.Button(description="×", tooltip=f"Remove ({attachment.note})",
                                layout=widgets.Layout(width="28px", height="22px", padding="0"))

        def drop(_: Any, attachment: Attachment = attachment) -> None:
            with self._lock:
                if attachment in self._pending:
                    self._pending.remove(attachment)
            self.show()

        remove.on_click(drop)
        return widgets.VBox([preview, remove], _dom_classes=(CSS_CLASSES["attachment"],),
                            layout=widgets.Layout(align_items="center", margin="0 4px"))
