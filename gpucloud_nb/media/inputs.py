"""Reading what a user hands in: paths, bytes, file objects and ``data:`` URLs, size first.

A file over its limit is refused from its size alone, before it is read or decoded; the helpers
for the one-sentence refusals (sizes, durations, what some bytes look like) live here too.

    >>> parse_data_url("data:text/plain,hi")
    ('text/plain', b'hi')
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import io
import os
import stat
import urllib.parse
from pathlib import Path
from typing import IO, Union

from PIL import Image

from gpucloud_nb.errors import InvalidInputError
from gpucloud_nb.media.limits import MB

ImageInput = Union[str, "os.PathLike[str]", bytes, bytearray, memoryview, Image.Image, IO[bytes]]
AudioInput = Union[str, "os.PathLike[str]", bytes, bytearray, memoryview, IO[bytes]]
THE_IMAGE = "The image"
THE_AUDIO = "The audio"


_BASE64_CHUNK = 3 * 16 * 1024  # a multiple of 3 (no padding between chunks); 64 KB of text each


def base64_url(prefix: str, data: bytes) -> str:
    """``prefix`` followed by ``data`` in base64, with no full-size intermediate copy.

    ``prefix + b64encode(data).decode()`` builds three text-sized buffers (the base64 bytes, their
    ``str``, and the concatenation). Small chunks joined once build only the final ``str`` plus
    chunks that malloc recycles: on a 10 MB photo, a third fewer fresh pages for the system to map,
    which is most of the cost after base64 itself.
    """
    view = memoryview(data)
    parts = [prefix]
    parts.extend(binascii.b2a_base64(view[start: start + _BASE64_CHUNK], newline=False)
                 .decode("ascii") for start in range(0, len(view), _BASE64_CHUNK))
    return "".join(parts)




def size_text(value: int, limit: int) -> tuple[str, str]:
    """Sizes as shown in a message, precise enough that the value visibly exceeds the limit."""
    shown = f"{value / MB:.1f}"
    if float(shown) > limit / MB:
        return f"{shown} MB", f"{limit // MB} MB"
    return f"{value:,} bytes", f"{limit // MB} MB ({limit:,} bytes)"


def duration_text(seconds: float) -> str:
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours} h {minutes} min {secs} s"


_WORD_FORMATS = {"TIFF", "PIXAR", "SPIDER", "SUN", "FITS", "QOI", "GRIB", "BUFR", "AVIF", "ICO",
                 "ICNS", "HEIF", "HEIC", "WMF", "FLI"}


def article(word: str) -> str:
    """'a' or 'an' before a format name read as a word (TIFF) or spelt out (BMP, SGI)."""
    if word in _WORD_FORMATS:
        return "an" if word[0] in "AEIOU" else "a"
    return "an" if word[:1] in "AEFHILMNORSX" else "a"


def content_hint(data: bytes) -> str:
    """A short guess at what some non-image, non-audio bytes are, for a refusal message."""
    head = data[:4096]
    if head.startswith(b"%PDF-"):
        return "it is a PDF document"
    if head.startswith(b"PK\x03\x04"):
        return "it is a ZIP archive or an Office document"
    if head[4:8] == b"ftyp":
        brand = head[8:12]
        if brand in (b"heic", b"heix", b"mif1", b"msf1", b"hevc", b"heim", b"heis"):
            return "it is a HEIC/HEIF photo"
        if brand in (b"avif", b"avis"):
            return "it is an AVIF image"
        return "it is an MP4 video or audio file"
    if head.startswith(b"RIFF") and head[8:12] == b"WAVE":
        return "it is WAV audio"
    if head.startswith(b"ID3"):
        return "it is MP3 audio"
    if head.startswith(b"\x1a\x45\xdf\xa3"):
        return "it is a WEBM or Matroska file"
    if head.startswith(b"OggS"):
        return "it is an Ogg file"
    if head.startswith(b"fLaC"):
        return "it is FLAC audio"
    if b"\x00" not in head:
        text: str | None
        try:
            text = head.decode("utf-8")
        except UnicodeDecodeError as error:
            # A multi-byte character cut at the 4096-byte boundary is still text.
            text = head[: error.start].decode("utf-8") if error.start > len(head) - 4 else None
        if text is not None:
            start = text.lstrip().lower()
            if start.startswith("<svg") or ("<svg" in start and start.startswith("<?xml")):
                return "it is an SVG drawing"
            if start.startswith(("<!doctype html", "<html")):
                return "it looks like an HTML page"
            return "it looks like text"
    return "its content is not a format Pillow knows"




def is_remote_url(value: str) -> bool:
    return value[:8].lower().startswith(("http://", "https://"))


def parse_data_url(url: str, *, what: str = "image") -> tuple[str, bytes]:
    """Decode a ``data:`` URL into its declared MIME type and its bytes.

    Both base64 (``;base64,``) and percent-encoded payloads are read; whitespace inside base64 is
    ignored. A malformed URL raises :class:`InvalidInputError`.

        >>> parse_data_url("data:image/png;base64,iVBORw0KGgo=")
        ('image/png', b'\\x89PNG\\r\\n\\x1a\\n')
    """
    if not url[:5].lower() == "data:":
        raise InvalidInputError(f"The {what} address is not a data: URL.")
    header, comma, payload = url[5:].partition(",")
    if not comma:
        raise InvalidInputError(f"The {what} data: URL has no comma before its data.")
    params = [p.strip() for p in header.split(";")]
    mime = params[0].lower() or "text/plain"
    if any(p.lower() == "base64" for p in params[1:]):
        try:
            data = base64.b64decode("".join(payload.split()), validate=True)
        except (binascii.Error, ValueError):
            raise InvalidInputError(f"The {what} data: URL is not valid base64.") from None
    else:
        data = urllib.parse.unquote_to_bytes(payload)
    return mime, data


def shorten(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def subject_of_path(path: Path, name: str | None) -> str:
    return name or shorten(path.name or str(path))


def read_path(source: str | os.PathLike[str], name: str | None, *, what: str,
               limit: int | None) -> tuple[bytes, str, int]:
    """Read a file, refusing a missing file, a folder, or (when ``limit``) an oversize one unread.

    Returns ``(data, subject, size)``; ``data`` is ``b""`` when the size alone refused it.
    """
    path = Path(source).expanduser()
    subject = subject_of_path(path, name)
    try:
        info = path.stat()
    except FileNotFoundError:
        raise InvalidInputError(f"{name or shorten(os.fspath(source))} does not exist.") from None
    except OSError as error:
        raise InvalidInputError(f"{subject} cannot be read ({error.strerror}).") from None
    if stat.S_ISDIR(info.st_mode):
        raise InvalidInputError(f"{subject} is a folder, not {what} file.")
    if limit is not None and info.st_size > limit:
        return b"", subject, info.st_size
    try:
        data = path.read_bytes()
    except OSError as error:
        raise InvalidInputError(f"{subject} cannot be read ({error.strerror}).") from None
    return data, subject, len(data)


def read_stream(stream: IO[bytes], name: str | None, generic: str,
                 limit: int | None) -> tuple[bytes, str, int]:
    """Read a binary file object (at most ``limit + 1`` bytes when a limit is given)."""
    stream_name = getattr(stream, "name", None)
    subject = name or (os.path.basename(stream_name) if isinstance(stream_name, str) else "")
    subject = subject or generic
    if isinstance(stream, io.TextIOBase):
        raise InvalidInputError(f"{subject} was opened as text; open it in binary mode ('rb').")
    start = None
    with contextlib.suppress(OSError, ValueError, AttributeError):
        start = stream.tell() if stream.seekable() else None
    data = stream.read() if limit is None else stream.read(limit + 1)
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise InvalidInputError(f"{subject} was opened as text; open it in binary mode ('rb').")
    data = bytes(data)
    size = len(data)
    if limit is not None and size > limit:
        if start is not None:  # tell the real size when the stream can say it
            with contextlib.suppress(OSError, ValueError):
                size = stream.seek(0, io.SEEK_END) - start
        return b"", subject, size
    return data, subject, size


def read_input(source: object, name: str | None, *, generic: str, what: str,
               limit: int | None) -> tuple[bytes, str, int] | None:
    """Bytes, a path or a binary file object as ``(data, subject, size)`` (``data`` is ``b""``
    when the size alone refused it); ``None`` for any other kind of value."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
        return data, name or generic, len(data)
    if isinstance(source, (str, os.PathLike)):
        return read_path(source, name, what=what, limit=limit)
    if hasattr(source, "read"):
        return read_stream(source, name, generic, limit)  # type: ignore[arg-type]
    return None
