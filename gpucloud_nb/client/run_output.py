"""What a command run over SSH gives back: how it ended and the tails of its output, by line.

A command may print without end, so only the last :data:`TAIL_BYTES` of each stream are kept
(:class:`Tail`), with a count of what came before; output passed on as it arrives is cut into
whole lines (:class:`Lines`), a line longer than 64 KiB in pieces.

    >>> RunResult("ok\\n", "", 0).ok
    True
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass

__all__ = ["TAIL_BYTES", "Lines", "RunResult", "Tail"]

TAIL_BYTES = 10 * 1024 * 1024
"""How much of each stream a :class:`RunResult` keeps: the last 10 MiB."""
_LINE_CHARS = 64 * 1024


@dataclass(frozen=True, slots=True)
class RunResult:
    """What a remote command printed (the last :data:`TAIL_BYTES` of each stream) and how it ended.

    ``stdout_dropped`` / ``stderr_dropped`` count the bytes that came before the kept tail.

        >>> RunResult("ok\\n", "", 0).ok
        True
    """

    stdout: str
    stderr: str
    exit_status: int
    stdout_dropped: int = 0
    stderr_dropped: int = 0

    @property
    def ok(self) -> bool:
        """True when the command exited with status 0."""
        return self.exit_status == 0


class Tail:
    """The last ``limit`` bytes of a stream, and how many came before them."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.data = bytearray()
        self.dropped = 0

    def add(self, chunk: bytes) -> None:
        self.data += chunk
        if len(self.data) > 2 * self.limit:  # trim in batches: amortised O(1) per byte
            self.trim()

    def trim(self) -> None:
        extra = len(self.data) - self.limit
        if extra > 0:
            del self.data[:extra]
            self.dropped += extra

    def text(self) -> str:
        self.trim()
        return self.data.decode("utf-8", errors="backslashreplace")


class Lines:
    """Bytes in, whole decoded lines out; a line longer than ``_LINE_CHARS`` comes in pieces."""

    def __init__(self) -> None:
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="backslashreplace")
        self.partial = ""

    def feed(self, chunk: bytes) -> list[str]:
        text = self.partial + self.decoder.decode(chunk)
        lines = text.split("\n")
        self.partial = lines.pop()
        if len(text) > _LINE_CHARS:  # rare: cut long lines (and a long unfinished one)
            lines = [line[i:i + _LINE_CHARS] for line in lines
                     for i in range(0, len(line) or 1, _LINE_CHARS)]
            while len(self.partial) > _LINE_CHARS:
                lines.append(self.partial[:_LINE_CHARS])
                self.partial = self.partial[_LINE_CHARS:]
        return lines

    def end(self) -> list[str]:
        rest = self.partial + self.decoder.decode(b"", final=True)
        self.partial = ""
        return [rest] if rest else []
