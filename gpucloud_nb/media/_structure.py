"""What an image file's bytes say before it is decoded: complete, how many frames, trailing data.

These checks bound the work of a check (no frame is decoded to count frames) and refuse a file
that would not be only the picture (a PNG with an archive appended).

    >>> png_trailing_bytes(b"")
    0
"""

from __future__ import annotations

import contextlib
import struct
import threading
from collections.abc import Iterator

from PIL import Image, ImageFile

from gpucloud_nb.errors import InvalidInputError
from gpucloud_nb.media.limits import MAX_DECODED_PIXELS, MAX_FRAMES

_strict_lock = threading.Lock()
_strict_depth = 0  # checks running while the user's LOAD_TRUNCATED_IMAGES=True is set aside


@contextlib.contextmanager
def strict_decoding() -> Iterator[None]:
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


def check_complete(data: bytes, image: Image.Image, fmt: str, subject: str) -> None:
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
        with strict_decoding():
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


def check_decode_budget(data: bytes, image: Image.Image, fmt: str, subject: str) -> None:
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


def png_trailing_bytes(data: bytes) -> int:
    """How many bytes follow a PNG's IEND chunk (0 for a well-formed file)."""
    end = data.rfind(b"IEND")
    return 0 if end == -1 else max(0, len(data) - (end + 8))
