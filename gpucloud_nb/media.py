"""Checks on images and audio before anything is sent to an inference endpoint.

Every check here reads only the user's own file (or bytes, or in-memory image) and either returns
something the spec's limits accept or raises :class:`~gpucloud_nb.errors.InvalidInputError` with
one sentence naming the file, the limit and the value. Nothing is changed silently: an image is
converted, re-encoded or downscaled only when ``convert=True`` or ``max_side`` asks for it.

    >>> from gpucloud_nb.media import image_data_url, check_audio
    >>> image_data_url("cat.jpg")[:30]
    'data:image/jpeg;base64,/9j/4AAQ'
    >>> image_data_url("scan.bmp")
    InvalidInputError: scan.bmp is a BMP image; send JPEG, PNG, WEBP or GIF, or pass
    convert=True to convert it.
    >>> check_audio("talk.wav").duration_seconds
    12.5

Choices where the spec says only "20 MB" and "25 MB":

- Sizes are in decimal megabytes: 1 MB = 1,000,000 bytes, so an image may be at most 20,000,000
  bytes and an audio file at most 25,000,000 bytes. That is the smaller of the two usual readings,
  so a file accepted here is never refused by a server that reads "MB" as MiB. Sizes in messages
  use the same unit.
- The image limit applies to the encoded file (what is base64-encoded into the ``data:`` URL), not
  to the longer base64 text or to the decoded pixels.
- Audio "up to 4 hours" means at most 14,400 seconds, checked when the duration can be read from
  the file's header (WAV, MP3, MP4/M4A, WEBM); an MPEG program stream is checked by size only.

Bounded work, decided here:

- Size comes first, before any decoding, for a path, bytes, a file object and a ``data:`` URL
  (estimated from its base64 length). A ``PIL.Image`` is checked once encoded; an ``http(s)``
  address is passed through unchecked (the server fetches it).
- An animated GIF may have at most :data:`MAX_FRAMES` frames (counted from its blocks, without
  decoding) and :data:`MAX_DECODED_PIXELS` decoded pixels in all; :func:`thumbnail` decodes a
  JPEG at reduced scale and gives no thumbnail for another image over :data:`THUMBNAIL_PIXELS`.
- A polyglot PNG (bytes after its ``IEND`` chunk, e.g. a ZIP appended) is refused: the bytes sent
  would not be only the picture. ``convert=True`` re-encodes the picture alone.
- A WAV named ``.mp3`` is accepted by its content and uploaded as ``.wav`` with ``audio/wav``
  (an extension that disagrees with the content is replaced; mp3/mpga and mp4/m4a agree).
- A 0-second WAV is refused: there is nothing to transcribe.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import io
import os
import re
import stat
import struct
import threading
import urllib.parse
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Union

from PIL import Image, ImageFile, ImageOps, ImageSequence, UnidentifiedImageError

from .errors import InvalidInputError

__all__ = [
    "AUDIO_FORMATS",
    "IMAGE_FORMATS",
    "JPEG_QUALITY",
    "MAX_AUDIO_BYTES",
    "MAX_AUDIO_SECONDS",
    "MAX_DECODED_PIXELS",
    "MAX_FRAMES",
    "MAX_IMAGE_BYTES",
    "MB",
    "REENCODE_PIXELS",
    "CheckedAudio",
    "CheckedImage",
    "check_audio",
    "check_image",
    "image_data_url",
    "parse_data_url",
    "thumbnail",
]

MB = 1_000_000
"""One megabyte as the limits are read here: 1,000,000 bytes (decimal, the conservative reading)."""

MAX_IMAGE_BYTES = 20 * MB
"""Largest image file accepted: 20 MB = 20,000,000 bytes."""

MAX_AUDIO_BYTES = 25 * MB
"""Largest audio file accepted: 25 MB = 25,000,000 bytes."""

MAX_AUDIO_SECONDS = 4 * 60 * 60
"""Longest audio accepted, in seconds (4 hours)."""

IMAGE_FORMATS = ("JPEG", "PNG", "WEBP", "GIF")
"""Image formats the service takes, as Pillow names them."""

AUDIO_FORMATS = ("mp3", "mp4", "mpeg", "mpga", "m4a", "wav", "webm")
"""Audio formats the service takes, as file extensions."""

JPEG_QUALITY = 85
"""JPEG quality used whenever this module has to encode a JPEG."""

MAX_FRAMES = 1000
"""Most frames an animated GIF may have; each is decoded to check it, so this bounds the work."""

MAX_DECODED_PIXELS = 400_000_000
"""Most pixels decoded to check one animation (frames × width × height), to bound the work."""

THUMBNAIL_PIXELS = 40_000_000
#: The most pixels re-encoded (``convert``, ``max_side``, fitting under 20 MB): one RGBA copy of
#: 40 million pixels is 160 MB, so a re-encode stays under 300 MB. A JPEG over it is decoded at
#: reduced scale when ``max_side`` allows; anything else over it is refused in one sentence.
REENCODE_PIXELS = 40_000_000
"""Largest image (in pixels) a :func:`thumbnail` decodes in full; JPEGs decode reduced instead."""

_IMAGE_MIME = {"JPEG": "image/jpeg", "PNG": "image/png", "WEBP": "image/webp", "GIF": "image/gif"}
_FORMATS_TEXT = "JPEG, PNG, WEBP or GIF"
_AUDIO_TEXT = "mp3, mp4, mpeg, mpga, m4a, wav or webm"
_AUDIO_MIME = {
    "wav": "audio/wav",
    "mp3": "audio/mpeg",
    "mpga": "audio/mpeg",
    "mpeg": "video/mpeg",
    "mp4": "audio/mp4",
    "m4a": "audio/mp4",
    "webm": "audio/webm",
}

_AUDIO_FAMILY = {"wav": "wav", "mp3": "mpeg-audio", "mpga": "mpeg-audio", "mpeg": "mpeg",
                 "mp4": "mp4", "m4a": "mp4", "webm": "webm"}
"""Extensions that name the same content: a WAV named .mp3 is uploaded as .wav."""

ImageInput = Union[str, "os.PathLike[str]", bytes, bytearray, memoryview, Image.Image, IO[bytes]]
AudioInput = Union[str, "os.PathLike[str]", bytes, bytearray, memoryview, IO[bytes]]


# --------------------------------------------------------------------------------------------
# Results


@dataclass(frozen=True)
class CheckedImage:
    """An image that passed every check, ready to send.

    ``data`` holds the exact bytes that will be sent: the user's own bytes when nothing had to
    change, else the re-encoded image. ``changes`` lists what was done on request (``convert``,
    ``max_side``), empty when the bytes are the user's own.

        >>> checked = check_image("cat.png")
        >>> checked.format, checked.width, checked.height, checked.mime
        ('PNG', 640, 480, 'image/png')
        >>> checked.data_url()[:22]
        'data:image/png;base64,'
    """

    name: str | None
    format: str
    mime: str
    width: int
    height: int
    size_bytes: int
    data: bytes = field(repr=False)
    changes: tuple[str, ...] = ()

    def data_url(self) -> str:
        """Return the image as a ``data:<mime>;base64,...`` URL.

            >>> check_image(b"...png bytes...").data_url()[:22]
            'data:image/png;base64,'
        """
        return _base64_url(f"data:{self.mime};base64,", self.data)


_BASE64_CHUNK = 3 * 16 * 1024  # a multiple of 3 (no padding between chunks); 64 KB of text each


def _base64_url(prefix: str, data: bytes) -> str:
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


@dataclass(frozen=True)
class CheckedAudio:
    """An audio file that passed every check, ready to upload.

    ``name`` is the file name to upload under: the user's own name when its extension is one the
    service takes, else the name with the extension of the format found in the content (a
    recording given as bytes is sent as ``audio.wav``, ``audio.mp3``, ...). ``duration_seconds``
    is ``None`` when the format's header does not tell it.

        >>> audio = check_audio("talk.wav")
        >>> audio.name, audio.format, audio.mime, audio.duration_seconds
        ('talk.wav', 'wav', 'audio/wav', 12.5)
    """

    name: str
    mime: str
    size_bytes: int
    data: bytes = field(repr=False)
    duration_seconds: float | None
    format: str


# --------------------------------------------------------------------------------------------
# Small helpers for sentences


def _size_text(value: int, limit: int) -> tuple[str, str]:
    """Sizes as shown in a message, precise enough that the value visibly exceeds the limit."""
    shown = f"{value / MB:.1f}"
    if float(shown) > limit / MB:
        return f"{shown} MB", f"{limit // MB} MB"
    return f"{value:,} bytes", f"{limit // MB} MB ({limit:,} bytes)"


def _duration_text(seconds: float) -> str:
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours} h {minutes} min {secs} s"


_WORD_FORMATS = {"TIFF", "PIXAR", "SPIDER", "SUN", "FITS", "QOI", "GRIB", "BUFR", "AVIF", "ICO",
                 "ICNS", "HEIF", "HEIC", "WMF", "FLI"}


def _article(word: str) -> str:
    """'a' or 'an' before a format name read as a word (TIFF) or spelt out (BMP, SGI)."""
    if word in _WORD_FORMATS:
        return "an" if word[0] in "AEIOU" else "a"
    return "an" if word[:1] in "AEFHILMNORSX" else "a"


def _content_hint(data: bytes) -> str:
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


# --------------------------------------------------------------------------------------------
# Reading the user's input


def _is_remote_url(value: str) -> bool:
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


def _shorten(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _subject_of_path(path: Path, name: str | None) -> str:
    return name or _shorten(path.name or str(path))


def _read_path(source: str | os.PathLike[str], name: str | None, *, what: str,
               limit: int | None) -> tuple[bytes, str, int]:
    """Read a file, refusing a missing file, a folder, or (when ``limit``) an oversize one unread.

    Returns ``(data, subject, size)``; ``data`` is ``b""`` when the size alone refused it.
    """
    path = Path(source).expanduser()
    subject = _subject_of_path(path, name)
    try:
        info = path.stat()
    except FileNotFoundError:
        raise InvalidInputError(f"{name or _shorten(os.fspath(source))} does not exist.") from None
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


def _read_stream(stream: IO[bytes], name: str | None, generic: str,
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


# --------------------------------------------------------------------------------------------
# Images


_THE_IMAGE = "The image"
_THE_AUDIO = "The audio"
_strict_lock = threading.Lock()
_strict_depth = 0  # checks running while the user's LOAD_TRUNCATED_IMAGES=True is set aside


@contextlib.contextmanager
def _strict_decoding() -> Iterator[None]:
    """Make Pillow refuse truncated images for the duration of the block.

    Nothing is touched in the usual case, where ``ImageFile.LOAD_TRUNCATED_IMAGES`` is already
    ``False``. If the user turned it on, it is turned off while checks run (counted, so
    overlapping checks in several threads all stay strict) and turned back on after the last.
    """
    global _strict_depth
    with _strict_lock:
        active = _strict_depth > 0 or bool(ImageFile.LOAD_TRUNCATED_IMAGES)
        if active:
            _strict_depth += 1
            ImageFile.LOAD_TRUNCATED_IMAGES = False
    try:
        yield
    finally:
        if active:
            with _strict_lock:
                _strict_depth -= 1
                if _strict_depth == 0:
                    ImageFile.LOAD_TRUNCATED_IMAGES = True


_BOMB_NUMBERS = re.compile(r"\((\d+) pixels\) exceeds limit of (\d+) pixels")


def _bomb_message(subject: str, error: Exception) -> str:
    match = _BOMB_NUMBERS.search(str(error))
    if match:
        # Pillow's error reports twice the limit (its hard stop); every image over the limit
        # itself, where Pillow only warns, is refused here, so the limit itself is quoted.
        value, limit = int(match.group(1)), Image.MAX_IMAGE_PIXELS or int(match.group(2))
        return (f"{subject} is {value:,} pixels; images may be at most {limit:,} pixels "
                "(Pillow's decompression-bomb limit, Image.MAX_IMAGE_PIXELS).")
    return (f"{subject} has more pixels than Pillow's decompression-bomb limit "
            f"(Image.MAX_IMAGE_PIXELS = {Image.MAX_IMAGE_PIXELS:,}).")


def _open_image(data: bytes, subject: str) -> Image.Image:
    """``Image.open`` on bytes, with decompression bombs and unreadable content refused.

    Pillow only warns between ``MAX_IMAGE_PIXELS`` and twice that; the warning is made an error
    inside ``warnings.catch_warnings()``, which restores the user's filters on the way out.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        try:
            return Image.open(io.BytesIO(data))
        except (Image.DecompressionBombError, Image.DecompressionBombWarning) as error:
            raise InvalidInputError(_bomb_message(subject, error)) from None
        except UnidentifiedImageError:
            what = "in a format Pillow can read" if subject == _THE_IMAGE else (
                "an image Pillow can read")
            raise InvalidInputError(
                f"{subject} is not {what} ({_content_hint(data)}); use {_FORMATS_TEXT}.") from None
        except Exception as error:  # Pillow raises many types on a malformed header
            raise InvalidInputError(f"{subject} is truncated or damaged, so it cannot be sent "
                                    f"(Pillow could not open it: {error}).") from None


def _real_format(image: Image.Image) -> str:
    """The format by content; camera MPO files are JPEG files with extra pictures appended."""
    fmt = (image.format or "").upper()
    return "JPEG" if fmt == "MPO" else fmt


_JPEG_STANDALONE = frozenset([0x01, *range(0xD0, 0xD8)])


def _jpeg_is_complete(data: bytes) -> bool:
    """Whether a JPEG's segments are intact up to its first scan and an end marker follows it.

    Entropy-coded data never contains the bytes FF D9 (an FF there is always followed by 00 or a
    restart marker), so an end-of-image marker after the first scan's header means the file was
    not cut short. The search runs backwards from the end, so it costs almost nothing on a
    complete file.
    """
    size = len(data)
    if size < 4 or data[0] != 0xFF or data[1] != 0xD8:
        return False
    pos = 2
    while True:
        while pos < size and data[pos] != 0xFF:  # Pillow skips junk between segments too
            pos += 1
        while pos < size and data[pos] == 0xFF:  # fill bytes
            pos += 1
        if pos >= size:
            return False
        marker = data[pos]
        pos += 1
        if marker in _JPEG_STANDALONE or marker == 0xD8:
            continue
        if marker == 0xD9 or pos + 2 > size:
            return False
        length = (data[pos] << 8) | data[pos + 1]
        if length < 2 or pos + length > size:
            return False
        pos += length
        if marker == 0xDA:  # start of scan: entropy-coded data follows
            break
    return data.rfind(b"\xff\xd9", pos) != -1


def _check_complete(data: bytes, image: Image.Image, fmt: str, subject: str) -> None:
    """Refuse a truncated or damaged image of one of the accepted formats (consumes ``image``).

    - JPEG has no checksum (Pillow's ``verify()`` checks nothing for it), and libjpeg decodes
      most damaged data without an error, so a full decode (6-10 times the cost of the whole
      check, even at 1/8 scale with ``draft()``) would add little: the check is structural, see
      :func:`_jpeg_is_complete`, and catches every cut file.
    - PNG: ``verify()`` reads every chunk up to IEND and checks its CRC-32, which catches a cut
      file and any damaged byte.
    - WEBP: the RIFF header's size must fit in the data, then the first frame is decoded.
    - GIF: every frame is decoded.
    """
    problem = None
    try:
        with _strict_decoding():
            if fmt == "JPEG":
                if not _jpeg_is_complete(data):
                    problem = "it ends before its image data does"
            elif fmt == "PNG":
                image.verify()
            elif fmt == "WEBP":
                riff_size = struct.unpack_from("<I", data, 4)[0] if len(data) >= 12 else 0
                if len(data) < 12 or riff_size + 8 > len(data):
                    problem = "it ends before its image data does"
                else:
                    image.load()
            elif fmt == "GIF":
                for frame in range(getattr(image, "n_frames", 1)):
                    image.seek(frame)
                    image.load()
    except Exception as error:  # Pillow raises OSError, SyntaxError, ValueError, EOFError...
        problem = str(error) or type(error).__name__
    if problem:
        raise InvalidInputError(
            f"{subject} is truncated or damaged, so it cannot be sent ({problem}).")


def _gif_frames(data: bytes, cap: int) -> int:
    """Count a GIF's frames by walking its blocks, without decoding; stops past ``cap``."""
    if len(data) < 13:
        return 0
    flags = data[10]
    pos = 13 + (3 * (2 << (flags & 7)) if flags & 0x80 else 0)
    frames = 0
    size = len(data)
    while pos < size and frames <= cap:
        kind = data[pos]
        if kind == 0x3B:  # trailer
            break
        if kind == 0x21:  # extension: label, then sub-blocks
            pos += 2
        elif kind == 0x2C:  # image descriptor (+ local colour table), LZW size, sub-blocks
            frames += 1
            if pos + 10 > size:
                break
            local = data[pos + 9]
            pos += 10 + (3 * (2 << (local & 7)) if local & 0x80 else 0) + 1
        else:
            break
        while pos < size and data[pos]:
            pos += data[pos] + 1
        pos += 1
    return frames


def _check_decode_budget(data: bytes, image: Image.Image, fmt: str, subject: str) -> None:
    """Refuse an animation whose frames would take unbounded time to decode and check."""
    if fmt != "GIF":
        return
    frames = _gif_frames(data, MAX_FRAMES)
    if frames > MAX_FRAMES:
        raise InvalidInputError(
            f"{subject} has more than {MAX_FRAMES:,} frames; animated images may have at most "
            f"{MAX_FRAMES:,}.")
    pixels = frames * image.width * image.height
    if pixels > MAX_DECODED_PIXELS:
        raise InvalidInputError(
            f"{subject} has {frames:,} frames of {image.width}×{image.height} pixels "
            f"({pixels:,} in all); animations may hold at most {MAX_DECODED_PIXELS:,} pixels.")


def _png_trailing_bytes(data: bytes) -> int:
    """How many bytes follow a PNG's IEND chunk (0 for a well-formed file)."""
    end = data.rfind(b"IEND")
    return 0 if end == -1 else max(0, len(data) - (end + 8))


def _has_alpha(image: Image.Image) -> bool:
    return image.mode in ("RGBA", "LA", "PA", "La", "RGBa") or (
        image.mode == "P" and "transparency" in image.info)


def _flatten(image: Image.Image) -> Image.Image:
    """An RGB (or L) copy of ``image``; transparent parts go on white, as JPEG has no alpha."""
    if image.mode in ("RGB", "L"):
        return image
    if _has_alpha(image):
        rgba = image.convert("RGBA")
        background = Image.new("RGB", rgba.size, (255, 255, 255))
        background.paste(rgba, mask=rgba.getchannel("A"))
        return background
    return image.convert("RGB")


def _encode(image: Image.Image, fmt: str, *, quality: int | str = JPEG_QUALITY) -> bytes:
    """Encode one still image as ``fmt`` (JPEG, PNG, WEBP or GIF)."""
    buffer = io.BytesIO()
    if fmt == "JPEG":
        image.save(buffer, "JPEG", quality=quality)
    elif fmt == "PNG":
        if image.mode not in ("1", "L", "LA", "I", "I;16", "P", "RGB", "RGBA"):
            image = image.convert("RGBA" if _has_alpha(image) else "RGB")
        image.save(buffer, "PNG")
    elif fmt == "WEBP":
        if image.mode not in ("RGB", "RGBA"):
            image = image.convert("RGBA" if _has_alpha(image) else "RGB")
        image.save(buffer, "WEBP", quality=JPEG_QUALITY)
    else:
        image.save(buffer, fmt)
    return buffer.getvalue()


def _scaled_size(width: int, height: int, max_side: int) -> tuple[int, int]:
    scale = max_side / max(width, height)
    return max(1, round(width * scale)), max(1, round(height * scale))


def _resize(image: Image.Image, size: tuple[int, int]) -> Image.Image:
    if image.mode not in ("L", "LA", "RGB", "RGBA", "I", "F"):
        image = image.convert("RGBA" if _has_alpha(image) else "RGB")
    return image.resize(size, Image.Resampling.LANCZOS)


def _encode_animation(image: Image.Image, fmt: str, size: tuple[int, int]) -> bytes:
    """Resize every frame of an animated GIF, WEBP or PNG and encode them as ``fmt``."""
    frames: list[Image.Image] = []
    durations: list[int] = []
    current = image.tell()
    try:
        for frame in ImageSequence.Iterator(image):
            duration = frame.info.get("duration", image.info.get("duration", 100))
            durations.append(int(duration or 100))
            rgba = frame.convert("RGBA")
            frames.append(rgba if rgba.size == size else _resize(rgba, size))
    finally:
        image.seek(current)  # leave a caller's image on the frame it was on
    buffer = io.BytesIO()
    options: dict[str, object] = {"save_all": True, "append_images": frames[1:],
                                  "duration": durations, "loop": image.info.get("loop", 0)}
    if fmt == "WEBP":
        options["quality"] = JPEG_QUALITY
    if fmt == "GIF":
        options["disposal"] = 2
    frames[0].save(buffer, fmt, **options)
    return buffer.getvalue()


def _fit_as_jpeg(image: Image.Image, subject: str) -> tuple[bytes, tuple[int, int], bool]:
    """Encode as JPEG at :data:`JPEG_QUALITY`, downscaling until it fits the size limit.

    Returns ``(data, size, downscaled)``.
    """
    work = _flatten(image)
    downscaled = False
    for _ in range(10):
        data = _encode(work, "JPEG")
        if len(data) <= MAX_IMAGE_BYTES:
            return data, work.size, downscaled
        scale = min(0.9, (MAX_IMAGE_BYTES / len(data)) ** 0.5 * 0.95)
        size = (max(1, int(work.width * scale)), max(1, int(work.height * scale)))
        work = work.resize(size, Image.Resampling.LANCZOS)
        downscaled = True
    value, limit = _size_text(len(data), MAX_IMAGE_BYTES)
    raise InvalidInputError(
        f"{subject} is still {value} as a JPEG; images may be at most {limit}.")


def _within_reencode_budget(image: Image.Image, subject: str, max_side: int | None) -> None:
    """Before loading ``image`` to re-encode it: decode a JPEG smaller, or refuse a huge image."""
    width, height = image.size
    if width * height <= REENCODE_PIXELS:
        return
    if image.format == "JPEG" and max_side:
        image.draft(image.mode, _scaled_size(width, height, max_side))  # a reduced decode
        if image.size[0] * image.size[1] <= REENCODE_PIXELS:
            return
    raise InvalidInputError(
        f"{subject} is {width}×{height} ({width * height / 1e6:.0f} million pixels); "
        f"re-encoding an image over {REENCODE_PIXELS // 1_000_000} million pixels would take too "
        "much memory here: make it smaller first.")


def _reencode(image: Image.Image, subject: str, name: str | None, *, source_format: str,
              purpose: str, max_side: int | None, convert: bool,
              transpose: bool) -> CheckedImage:
    """Re-encode a loaded image, for one ``purpose``:

    - ``"convert"``: a format the service does not take, as PNG;
    - ``"downscale"``: to ``max_side``, in its own format;
    - ``"fit"``: as JPEG at :data:`JPEG_QUALITY`, downscaled until it is at most 20 MB.

    A PNG or downscaled image that comes out over 20 MB falls back to ``"fit"`` when ``convert``
    is set, and is refused otherwise. EXIF orientation is applied when ``transpose`` is set, since
    re-encoding drops the metadata that says how to turn the picture.
    """
    fmt = {"convert": "PNG", "fit": "JPEG"}.get(purpose, source_format)
    animated = bool(getattr(image, "is_animated", False)) and fmt in ("GIF", "WEBP", "PNG")
    changes: list[str] = []
    work = image
    if transpose and not animated:
        work = ImageOps.exif_transpose(image)
        if work.size != image.size:
            changes.append("turned upright as its EXIF orientation says")
    size = work.size
    if max_side and max(size) > max_side:
        new_size = _scaled_size(*size, max_side)
        changes.append(f"downscaled from {size[0]}×{size[1]} to {new_size[0]}×{new_size[1]}")
        size = new_size
        if not animated:
            work = _resize(work, size)
    data = b""
    if purpose != "fit":
        data = _encode_animation(image, fmt, size) if animated else _encode(work, fmt)
        if purpose == "convert":
            changes.append(f"converted from {source_format} to PNG")
        if len(data) > MAX_IMAGE_BYTES and not convert:
            value, limit = _size_text(len(data), MAX_IMAGE_BYTES)
            raise InvalidInputError(
                f"{subject} is {value} once encoded as {fmt}; images may be at most {limit} "
                "(pass convert=True to re-encode it as JPEG).")
    if purpose == "fit" or len(data) > MAX_IMAGE_BYTES:
        if animated:
            changes.append("kept the first frame only, as JPEG has no animation")
        changes = [c for c in changes if not c.startswith("converted")]
        data, size, downscaled = _fit_as_jpeg(work, subject)
        if downscaled:
            changes.append(f"downscaled to {size[0]}×{size[1]} to fit under "
                           f"{MAX_IMAGE_BYTES // MB} MB")
        changes.append(f"re-encoded from {source_format} as JPEG (quality {JPEG_QUALITY}) "
                       f"to fit under {MAX_IMAGE_BYTES // MB} MB")
        fmt = "JPEG"
    return CheckedImage(name=name, format=fmt, mime=_IMAGE_MIME[fmt], width=size[0],
                        height=size[1], size_bytes=len(data), data=data, changes=tuple(changes))


def _load_strict(image: Image.Image, subject: str) -> None:
    try:
        with _strict_decoding():
            image.load()
    except Exception as error:
        raise InvalidInputError(
            f"{subject} is truncated or damaged, so it cannot be sent ({error}).") from None


def _check_image_bytes(data: bytes, subject: str, name: str | None, *, convert: bool,
                       max_side: int | None) -> CheckedImage:
    if not data:
        raise InvalidInputError(f"{subject} is empty.")
    too_big = len(data) > MAX_IMAGE_BYTES
    if too_big and not convert:  # before any decoding: size is the cheapest check
        value, limit = _size_text(len(data), MAX_IMAGE_BYTES)
        raise InvalidInputError(
            f"{subject} is {value}; images may be at most {limit} "
            "(pass convert=True to re-encode it as JPEG).")
    image = _open_image(data, subject)
    with image:
        fmt = _real_format(image)
        width, height = image.size
        _check_decode_budget(data, image, fmt, subject)
        if fmt not in IMAGE_FORMATS:
            if not convert:
                raise InvalidInputError(
                    f"{subject} is {_article(fmt)} {fmt} image; send {_FORMATS_TEXT}, "
                    "or pass convert=True to convert it.")
            _within_reencode_budget(image, subject, max_side)
            _load_strict(image, subject)
            return _reencode(image, subject, name, source_format=fmt, purpose="convert",
                             max_side=max_side, convert=True, transpose=True)
        _check_complete(data, image, fmt, subject)
    trailing = _png_trailing_bytes(data) if fmt == "PNG" else 0
    if trailing and not convert:
        raise InvalidInputError(
            f"{subject} has {trailing:,} bytes after the end of its PNG data (another file may "
            "be appended to it); pass convert=True to send the picture alone.")
    if trailing and not too_big and not (max_side and max(width, height) > max_side):
        with _open_image(data, subject) as image:
            _within_reencode_budget(image, subject, None)
            _load_strict(image, subject)
            return _reencode(image, subject, name, source_format=fmt, purpose="downscale",
                             max_side=None, convert=True, transpose=False)
    if too_big or (max_side and max(width, height) > max_side):
        with _open_image(data, subject) as image:
            _within_reencode_budget(image, subject, max_side)
            _load_strict(image, subject)
            return _reencode(image, subject, name, source_format=fmt,
                             purpose="fit" if too_big else "downscale", max_side=max_side,
                             convert=convert, transpose=True)
    return CheckedImage(name=name, format=fmt, mime=_IMAGE_MIME[fmt], width=width,
                        height=height, size_bytes=len(data), data=data)


def _check_pil_image(image: Image.Image, subject: str, name: str | None, *, convert: bool,
                     max_side: int | None) -> CheckedImage:
    """Encode an in-memory image in its own format when allowed, else as PNG."""
    fmt = _real_format(image)
    target = fmt if fmt in IMAGE_FORMATS else "PNG"
    _load_strict(image, subject)
    if max_side and max(image.size) > max_side:
        return _reencode(image, subject, name, source_format=target, purpose="downscale",
                         max_side=max_side, convert=convert, transpose=False)
    if target == "JPEG":
        try:  # an unmodified JPEG keeps its own quantisation tables
            data = _encode(image, "JPEG", quality="keep")
        except (ValueError, OSError):
            data = _encode(_flatten(image), "JPEG")
    elif getattr(image, "is_animated", False):
        data = _encode_animation(image, target, image.size)
    else:
        data = _encode(image, target)
    if len(data) > MAX_IMAGE_BYTES:
        if not convert:
            value, limit = _size_text(len(data), MAX_IMAGE_BYTES)
            raise InvalidInputError(
                f"{subject} is {value} once encoded as {target}; images may be at most {limit} "
                "(pass convert=True to re-encode it as JPEG).")
        return _reencode(image, subject, name, source_format=target, purpose="fit",
                         max_side=None, convert=True, transpose=False)
    return CheckedImage(name=name, format=target, mime=_IMAGE_MIME[target], width=image.width,
                        height=image.height, size_bytes=len(data), data=data)


def _check_max_side(max_side: int | None) -> None:
    if max_side is None:
        return
    if isinstance(max_side, bool) or not isinstance(max_side, int) or max_side < 1:
        raise InvalidInputError(
            f"max_side must be a positive whole number of pixels; got {max_side!r}.")


def check_image(image: ImageInput, *, convert: bool = False, max_side: int | None = None,
                name: str | None = None) -> CheckedImage:
    """Open ``image`` with Pillow and check it against the spec's image limits.

    ``image`` is a path, bytes, a binary file object, a ``data:`` URL or a ``PIL.Image.Image``.
    The format is read from the content, never from the file name, and must be JPEG, PNG, WEBP or
    GIF; the file must be complete, at most 20 MB (20,000,000 bytes), and within Pillow's
    decompression-bomb limit. A valid file is returned byte for byte, never re-encoded.

    On request only:

    - ``convert=True``: another format Pillow reads (BMP, TIFF, ...) is converted to PNG (or JPEG
      if the PNG would exceed 20 MB); an image over 20 MB is re-encoded as JPEG at quality 85 and
      downscaled until it fits. EXIF orientation is applied, as the metadata is not kept.
    - ``max_side=N``: an image whose longer side exceeds ``N`` pixels is downscaled to it and
      re-encoded in its own format.

    An in-memory ``PIL.Image.Image`` is encoded in its own ``.format`` when that is allowed (an
    unmodified JPEG keeps its quality), else as PNG.

        >>> info = check_image("photo.jpg", max_side=1024)
        >>> info.format, info.width, info.height, info.changes
        ('JPEG', 1024, 683, ('downscaled from 6000×4000 to 1024×683',))

    Raises :class:`InvalidInputError` with one sentence naming the file, the limit and the value.
    """
    _check_max_side(max_side)
    if isinstance(image, Image.Image):
        filename = getattr(image, "filename", "") or ""
        name = name or (os.path.basename(filename) if isinstance(filename, str) else "") or None
        return _check_pil_image(image, name or _THE_IMAGE, name, convert=convert,
                                max_side=max_side)
    limit = None if convert else MAX_IMAGE_BYTES
    if isinstance(image, str) and _is_remote_url(image):
        raise InvalidInputError(
            f"{image} is a web address; only local images can be checked "
            "(image_data_url passes web addresses through unchanged).")
    if isinstance(image, str) and image[:5].lower() == "data:":
        subject = name or _THE_IMAGE
        estimate = (len(image) - image.find(",") - 1) * 3 // 4  # an upper bound of the bytes
        if limit is not None and estimate > limit + 3 and ";base64" in image[:100].lower():
            _, _, payload = image.partition(",")
            estimate = len("".join(payload.split()).rstrip("=")) * 3 // 4
        if limit is not None and estimate > limit and ";base64" in image[:100].lower():
            value, limit_text = _size_text(estimate, MAX_IMAGE_BYTES)
            raise InvalidInputError(
                f"{subject} is {value}; images may be at most {limit_text} "
                "(pass convert=True to re-encode it as JPEG).")
        _, data = parse_data_url(image)
        size = len(data)
    elif isinstance(image, (bytes, bytearray, memoryview)):
        data = bytes(image)
        subject, size = name or _THE_IMAGE, len(data)
    elif isinstance(image, (str, os.PathLike)):
        data, subject, size = _read_path(image, name, what="an image", limit=limit)
    elif hasattr(image, "read"):
        data, subject, size = _read_stream(image, name, _THE_IMAGE, limit)
    else:
        raise TypeError(
            "image must be a path, bytes, a binary file, a data: URL or a PIL.Image.Image, "
            f"not {type(image).__name__}.")
    if not data and size > 0:  # refused by its size before reading it
        value, limit_text = _size_text(size, MAX_IMAGE_BYTES)
        raise InvalidInputError(
            f"{subject} is {value}; images may be at most {limit_text} "
            "(pass convert=True to re-encode it as JPEG).")
    return _check_image_bytes(data, subject, None if subject == _THE_IMAGE else subject,
                              convert=convert, max_side=max_side)


def image_data_url(image: ImageInput, *, convert: bool = False, max_side: int | None = None,
                   name: str | None = None) -> str:
    """Return ``image`` as a checked ``data:image/...;base64,`` URL for a chat message.

    Takes what :func:`check_image` takes and applies the same checks and options. An
    ``http://`` or ``https://`` address is returned unchanged (the server fetches it); a
    ``data:`` URL is decoded, checked like bytes, and rebuilt with the MIME type of its real
    format. ``convert`` and ``max_side`` do not apply to web addresses.

        >>> image_data_url("cat.png")[:22]
        'data:image/png;base64,'
        >>> image_data_url("https://example.com/cat.png")
        'https://example.com/cat.png'
        >>> image_data_url("scan.bmp", convert=True)[:22]
        'data:image/png;base64,'
    """
    if isinstance(image, str) and _is_remote_url(image):
        return image
    return check_image(image, convert=convert, max_side=max_side, name=name).data_url()


def thumbnail(data: bytes, side: int) -> tuple[bytes, str] | None:
    """A small PNG (with transparency) or JPEG of a checked image's first frame, or ``None``.

    Memory stays bounded whatever the image: a JPEG is decoded at reduced scale
    (``Image.draft``), any other format only when it has at most :data:`THUMBNAIL_PIXELS`
    pixels; a larger one gets no thumbnail (``None``) rather than a full decode.

        >>> thumbnail(check_image("cat.png").data, 96)[1]
        'png'
    """
    with _open_image(data, _THE_IMAGE) as image:
        if image.format == "JPEG" or image.format == "MPO":
            image.draft("RGB", (side, side))
        elif image.width * image.height > THUMBNAIL_PIXELS:
            return None
        image.seek(0)
        picture = ImageOps.exif_transpose(image) or image
        picture = picture.copy()
    picture.thumbnail((side, side))
    output = io.BytesIO()
    if picture.mode in ("RGBA", "LA", "P", "PA"):
        picture.convert("RGBA").save(output, format="PNG", optimize=True)
        return output.getvalue(), "png"
    picture.convert("RGB").save(output, format="JPEG", quality=80)
    return output.getvalue(), "jpeg"


# --------------------------------------------------------------------------------------------
# Audio: format by content


# Bitrates (kbit/s) by (MPEG-1?, layer) and sample rates by version, per the MPEG audio header.
_BITRATES = {
    (True, 1): (0, 32, 64, 96, 128, 160, 192, 224, 256, 288, 320, 352, 384, 416, 448),
    (True, 2): (0, 32, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384),
    (True, 3): (0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320),
    (False, 1): (0, 32, 48, 56, 64, 80, 96, 112, 128, 144, 160, 176, 192, 224, 256),
    (False, 2): (0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160),
    (False, 3): (0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160),
}
_SAMPLE_RATES = {3: (44100, 48000, 32000), 2: (22050, 24000, 16000), 0: (11025, 12000, 8000)}


@dataclass(frozen=True)
class _MpegFrame:
    layer: int
    mpeg1: bool
    bitrate: int  # bit/s
    sample_rate: int
    length: int  # bytes
    samples: int
    mono: bool


def _mpeg_frame(data: bytes, pos: int) -> _MpegFrame | None:
    """Parse an MPEG audio frame header at ``pos``, or ``None`` if there is none."""
    if pos + 4 > len(data) or data[pos] != 0xFF or data[pos + 1] & 0xE0 != 0xE0:
        return None
    b1, b2, b3 = data[pos + 1], data[pos + 2], data[pos + 3]
    version = (b1 >> 3) & 3
    layer = 4 - ((b1 >> 1) & 3)  # 1, 2 or 3; 4 means the reserved value 0 (and ADTS AAC)
    bitrate_index = b2 >> 4
    rate_index = (b2 >> 2) & 3
    if version == 1 or layer == 4 or bitrate_index in (0, 15) or rate_index == 3:
        return None
    mpeg1 = version == 3
    bitrate = _BITRATES[(mpeg1, layer)][bitrate_index] * 1000
    sample_rate = _SAMPLE_RATES[version][rate_index]
    padding = (b2 >> 1) & 1
    if layer == 1:
        length, samples = (12 * bitrate // sample_rate + padding) * 4, 384
    elif layer == 2 or mpeg1:
        length, samples = 144 * bitrate // sample_rate + padding, 1152
    else:
        length, samples = 72 * bitrate // sample_rate + padding, 576
    return _MpegFrame(layer, mpeg1, bitrate, sample_rate, length, samples, (b3 >> 6) == 3)


def _find_mpeg_audio(data: bytes, start: int, window: int = 64 * 1024) -> int | None:
    """Position of the first of two consecutive valid MPEG audio frames near ``start``."""
    pos = data.find(b"\xff", start, start + window)
    while pos != -1:
        frame = _mpeg_frame(data, pos)
        if frame and frame.length > 4:
            following = pos + frame.length
            # A second frame must follow, unless this one ends the file (before an ID3v1 tag).
            if _mpeg_frame(data, following) or following in (len(data), len(data) - 128):
                return pos
        pos = data.find(b"\xff", pos + 1, start + window)
    return None


def _id3_end(data: bytes) -> int:
    """Length of a leading ID3v2 tag (0 if none)."""
    if len(data) < 10 or not data.startswith(b"ID3"):
        return 0
    size = 0
    for byte in data[6:10]:
        size = (size << 7) | (byte & 0x7F)
    footer = 10 if data[5] & 0x10 else 0
    return 10 + size + footer


def _mp3_duration(data: bytes, pos: int) -> float | None:
    """Duration from a Xing/Info or VBRI header, else from the bitrate (constant-bitrate file)."""
    frame = _mpeg_frame(data, pos)
    if frame is None:
        return None
    first = data[pos: pos + frame.length]
    for tag in (b"Xing", b"Info"):
        at = first.find(tag)
        if at != -1 and at + 12 <= len(first):
            flags = struct.unpack_from(">I", first, at + 4)[0]
            if flags & 1:
                frames = struct.unpack_from(">I", first, at + 8)[0]
                return frames * frame.samples / frame.sample_rate
    at = first.find(b"VBRI")
    if at != -1 and at + 18 <= len(first):
        frames = struct.unpack_from(">I", first, at + 14)[0]
        return frames * frame.samples / frame.sample_rate
    audio_bytes = len(data) - pos - (128 if data[-128:-125] == b"TAG" else 0)
    return audio_bytes * 8 / frame.bitrate


def _wav_duration(data: bytes, subject: str) -> float:
    """Duration of a RIFF/WAVE file from its ``fmt `` and ``data`` chunks."""
    pos, byte_rate, data_size = 12, None, None
    while pos + 8 <= len(data):
        chunk_id = data[pos: pos + 4]
        chunk_size = struct.unpack_from("<I", data, pos + 4)[0]
        body = pos + 8
        if chunk_id == b"fmt " and chunk_size >= 16 and body + 16 <= len(data):
            _, channels, rate, byte_rate, _, bits = struct.unpack_from("<HHIIHH", data, body)
            byte_rate = byte_rate or channels * rate * bits // 8
        elif chunk_id == b"data":
            available = len(data) - body
            # A streamed WAV may declare 0 or 0xFFFFFFFF; a cut one declares more than it has.
            data_size = available if chunk_size in (0, 0xFFFFFFFF) else min(chunk_size, available)
            break
        pos = body + chunk_size + (chunk_size & 1)
    if not byte_rate or data_size is None:
        raise InvalidInputError(
            f"{subject} is a damaged WAV file: its format or data header is missing.")
    return data_size / byte_rate


def _box_iter(data: bytes, start: int, end: int) -> Iterator[tuple[bytes, int, int]]:
    """MP4 boxes between ``start`` and ``end``: ``(type, body start, box end)``."""
    pos = start
    while pos + 8 <= end:
        size, kind = struct.unpack_from(">I4s", data, pos)
        header = 8
        if size == 1:
            if pos + 16 > end:
                return
            size = struct.unpack_from(">Q", data, pos + 8)[0]
            header = 16
        elif size == 0:
            size = end - pos
        if size < header:
            return
        yield kind, pos + header, min(pos + size, end)
        pos += size


def _mp4_duration(data: bytes) -> float | None:
    """Duration from the ``moov/mvhd`` box (``None`` if absent or unknown)."""
    for kind, body, end in _box_iter(data, 0, len(data)):
        if kind != b"moov":
            continue
        for child, child_body, child_end in _box_iter(data, body, end):
            if child != b"mvhd" or child_body + 32 > child_end:
                continue
            if data[child_body] == 1:
                timescale, duration = struct.unpack_from(">IQ", data, child_body + 20)
                unknown = 0xFFFFFFFFFFFFFFFF
            else:
                timescale, duration = struct.unpack_from(">II", data, child_body + 12)
                unknown = 0xFFFFFFFF
            if timescale and duration and duration != unknown:
                return duration / timescale
            return None
    return None


def _ebml_vint(data: bytes, pos: int, *, keep_marker: bool) -> tuple[int, int] | None:
    """An EBML variable-length integer at ``pos``: ``(value, length)``."""
    if pos >= len(data):
        return None
    first = data[pos]
    length = 1
    while length <= 8 and not first & (0x80 >> (length - 1)):
        length += 1
    if length > 8 or pos + length > len(data):
        return None
    value = first if keep_marker else first & (0xFF >> length)
    for byte in data[pos + 1: pos + length]:
        value = (value << 8) | byte
    return value, length


def _ebml_elements(data: bytes, start: int, end: int) -> Iterator[tuple[int, int, int]]:
    """EBML elements between ``start`` and ``end``: ``(id, body start, body end)``."""
    pos = start
    while pos < end:
        element = _ebml_vint(data, pos, keep_marker=True)
        if element is None:
            return
        element_id, id_length = element
        size = _ebml_vint(data, pos + id_length, keep_marker=False)
        if size is None:
            return
        value, size_length = size
        body = pos + id_length + size_length
        unknown = value == (1 << (7 * size_length)) - 1
        body_end = end if unknown else min(body + value, end)
        yield element_id, body, body_end
        pos = body_end


def _ebml_doctype(data: bytes) -> str | None:
    for element_id, body, end in _ebml_elements(data, 0, min(len(data), 4096)):
        if element_id == 0x1A45DFA3:
            for child, child_body, child_end in _ebml_elements(data, body, end):
                if child == 0x4282:
                    return data[child_body:child_end].decode("ascii", "replace").strip("\0")
    return None


def _webm_duration(data: bytes) -> float | None:
    """Duration from Segment/Info (``Duration`` times ``TimecodeScale`` nanoseconds)."""
    for element_id, body, end in _ebml_elements(data, 0, len(data)):
        if element_id != 0x18538067:  # Segment
            continue
        for child, child_body, child_end in _ebml_elements(data, body, end):
            if child == 0x1F43B675:  # first Cluster: Info comes before it
                return None
            if child != 0x1549A966:  # Info
                continue
            scale, duration = 1_000_000, None
            for item, item_body, item_end in _ebml_elements(data, child_body, child_end):
                raw = data[item_body:item_end]
                if item == 0x2AD7B1 and raw:
                    scale = int.from_bytes(raw, "big")
                elif item == 0x4489 and len(raw) in (4, 8):
                    duration = struct.unpack(">f" if len(raw) == 4 else ">d", raw)[0]
            return duration * scale / 1e9 if duration else None
        return None
    return None


_MP4_IMAGE_BRANDS = (b"heic", b"heix", b"mif1", b"msf1", b"hevc", b"heim", b"heis", b"avif",
                     b"avis")


def _sniff_audio(data: bytes) -> tuple[str | None, str]:
    """The accepted format found in the content, or ``(None, reason)``."""
    head = data[:64]
    if head.startswith(b"RIFF") and head[8:12] == b"WAVE":
        return "wav", ""
    if head[4:8] == b"ftyp":
        brand = head[8:12]
        if brand in _MP4_IMAGE_BRANDS:
            return None, "it is a HEIF/AVIF image"
        return ("m4a" if brand in (b"M4A ", b"M4B ", b"M4P ") else "mp4"), ""
    if head.startswith(b"\x1a\x45\xdf\xa3"):
        doctype = _ebml_doctype(data)
        if doctype == "webm":
            return "webm", ""
        return None, "it is a Matroska (MKV) file, not WEBM"
    if head.startswith(b"\x00\x00\x01\xba"):
        return "mpeg", ""
    if head.startswith(b"fLaC"):
        return None, "it is FLAC audio"
    if head.startswith(b"OggS"):
        return None, "it is Ogg audio"
    if head.startswith(b"FORM") and head[8:12] in (b"AIFF", b"AIFC"):
        return None, "it is AIFF audio"
    start = _id3_end(data)
    pos = _find_mpeg_audio(data, start)
    if pos is not None:
        frame = _mpeg_frame(data, pos)
        assert frame is not None
        return ("mp3" if frame.layer == 3 else "mpga"), ""
    if len(data) > 1 and data[0] == 0xFF and data[1] & 0xF6 == 0xF0:
        return None, "it is AAC audio in ADTS form"
    hint = _content_hint(data)
    if hint == "its content is not a format Pillow knows":
        hint = "its content is not a known audio format"
    return None, hint


def check_audio(file: AudioInput, *, name: str | None = None) -> CheckedAudio:
    """Check ``file`` against the spec's audio limits before a transcription request.

    ``file`` is a path, bytes, or a binary file object. The format is read from the content
    (WAV ``RIFF/WAVE``, MP3/MPEG audio frames or an ID3 tag, MP4/M4A ``ftyp``, WEBM EBML, MPEG
    program stream) and must be one of mp3, mp4, mpeg, mpga, m4a, wav or webm. The file must be
    at most 25 MB (25,000,000 bytes) and, where its header tells the duration, at most 4 hours.

        >>> audio = check_audio("talk.wav")
        >>> audio.name, audio.mime, audio.duration_seconds
        ('talk.wav', 'audio/wav', 12.5)
        >>> check_audio("notes.txt")
        InvalidInputError: notes.txt is not audio in a supported format (it looks like text);
        use mp3, mp4, mpeg, mpga, m4a, wav or webm.

    Raises :class:`InvalidInputError` with one sentence naming the file, the limit and the value.
    """
    if isinstance(file, (bytes, bytearray, memoryview)):
        data = bytes(file)
        subject, size = name or _THE_AUDIO, len(data)
    elif isinstance(file, (str, os.PathLike)):
        data, subject, size = _read_path(file, name, what="an audio", limit=MAX_AUDIO_BYTES)
    elif hasattr(file, "read"):
        data, subject, size = _read_stream(file, name, _THE_AUDIO, MAX_AUDIO_BYTES)
    else:
        raise TypeError(
            f"file must be a path, bytes or a binary file, not {type(file).__name__}.")
    if size > MAX_AUDIO_BYTES:
        value, limit = _size_text(size, MAX_AUDIO_BYTES)
        raise InvalidInputError(f"{subject} is {value}; audio files may be at most {limit}.")
    if not data:
        raise InvalidInputError(f"{subject} is empty.")
    fmt, reason = _sniff_audio(data)
    if fmt is None:
        what = "in a supported format" if subject == _THE_AUDIO else "audio in a supported format"
        raise InvalidInputError(f"{subject} is not {what} ({reason}); use {_AUDIO_TEXT}.")
    duration: float | None
    if fmt == "wav":
        duration = _wav_duration(data, subject)
    elif fmt in ("mp3", "mpga"):
        position = _find_mpeg_audio(data, _id3_end(data))
        duration = _mp3_duration(data, position) if position is not None else None
    elif fmt in ("mp4", "m4a"):
        duration = _mp4_duration(data)
    elif fmt == "webm":
        duration = _webm_duration(data)
    else:
        duration = None
    if duration == 0:
        raise InvalidInputError(f"{subject} is 0 seconds long; there is nothing to transcribe.")
    if duration is not None and duration > MAX_AUDIO_SECONDS:
        raise InvalidInputError(
            f"{subject} is {_duration_text(duration)} long; audio may be at most 4 hours.")
    upload_name = subject if subject != _THE_AUDIO else "audio"
    stem, dot, extension = upload_name.rpartition(".")
    if not dot or _AUDIO_FAMILY.get(extension.lower()) != _AUDIO_FAMILY[fmt]:
        upload_name = f"{stem if dot and stem else upload_name}.{fmt}"
    return CheckedAudio(name=upload_name, mime=_AUDIO_MIME[fmt], size_bytes=len(data), data=data,
                        duration_seconds=duration, format=fmt)
