"""Checking audio before a transcription: format by content, size, and duration read from the
header (WAV, MP3, MP4/M4A, WEBM) against the spec's 4 hours.

    >>> check_audio("talk.wav").duration_seconds  # doctest: +SKIP
    12.5
"""

from __future__ import annotations

import io
import logging
import struct
from collections.abc import Iterator
from dataclasses import dataclass

from tinytag import TinyTag

from gpucloud_nb.errors import InvalidInputError
from gpucloud_nb.media.inputs import (
    THE_AUDIO,
    AudioInput,
    content_hint,
    duration_text,
    read_input,
    size_text,
)
from gpucloud_nb.media.limits import AUDIO_FAMILY, AUDIO_MIME, AUDIO_TEXT, MAX_AUDIO_BYTES, MAX_AUDIO_SECONDS
from gpucloud_nb.media.results import CheckedAudio

__all__ = ["check_audio"]

log = logging.getLogger("gpucloud_nb.media")


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


def _tag_duration(data: bytes) -> float | None:
    """Duration read by tinytag (MP3 frames and Xing/VBRI headers, MP4 ``mvhd``), if it can."""
    try:
        tag = TinyTag.get(file_obj=io.BytesIO(data))
    except Exception:  # a third-party parser on untrusted bytes: unknown duration, size still checked
        log.debug("tinytag could not read a duration", exc_info=True)
        return None
    duration = tag.duration
    if not duration or (duration > MAX_AUDIO_SECONDS and _marks_unknown(duration)):
        return None
    return float(duration)


def _marks_unknown(seconds: float) -> bool:
    """True when ``seconds`` is an MP4 header's "unknown" duration (all ones) that tinytag divided
    by the file's timescale: the file's length is unknown, not over 4 hours."""
    for marker in (0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF):
        scale = marker / seconds
        if round(scale) >= 1 and abs(scale - round(scale)) < 1e-3:
            return True
    return False


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
    return float(data_size / byte_rate)


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
    hint = content_hint(data)
    if hint == "its content is not a format Pillow knows":
        hint = "its content is not a known audio format"
    elif hint == "it is MP3 audio":  # an ID3 tag, but no MPEG audio frame after it
        hint = "it has an MP3 tag but no audio frames after it"
    return None, hint


def check_audio(file: AudioInput, *, name: str | None = None) -> CheckedAudio:
    """Check ``file`` against the spec's audio limits before a transcription request.

    ``file`` is a path, bytes, or a binary file object. The format is read from the content
    (WAV ``RIFF/WAVE``, MP3/MPEG audio frames or an ID3 tag, MP4/M4A ``ftyp``, WEBM EBML, MPEG
    program stream) and must be one of mp3, mp4, mpeg, mpga, m4a, wav or webm. The file must be
    at most 25 MB (25,000,000 bytes) and, where its header tells the duration, at most 4 hours.

        >>> audio = check_audio("talk.wav")  # doctest: +SKIP
        >>> audio.name, audio.mime, audio.duration_seconds  # doctest: +SKIP
        ('talk.wav', 'audio/wav', 12.5)
        >>> check_audio("notes.txt")  # doctest: +SKIP
        InvalidInputError: notes.txt is not audio in a supported format (it looks like text);
        use mp3, mp4, mpeg, mpga, m4a, wav or webm.

    Raises :class:`InvalidInputError` with one sentence naming the file, the limit and the value.
    """
    read = read_input(file, name, generic=THE_AUDIO, what="an audio", limit=MAX_AUDIO_BYTES)
    if read is None:
        raise TypeError(
            f"file must be a path, bytes or a binary file, not {type(file).__name__}.")
    data, subject, size = read
    if size > MAX_AUDIO_BYTES:
        value, limit = size_text(size, MAX_AUDIO_BYTES)
        raise InvalidInputError(f"{subject} is {value}; audio files may be at most {limit}.")
    if not data:
        raise InvalidInputError(f"{subject} is empty.")
    fmt, reason = _sniff_audio(data)
    if fmt is None:
        what = "in a supported format" if subject == THE_AUDIO else "audio in a supported format"
        raise InvalidInputError(f"{subject} is not {what} ({reason}); use {AUDIO_TEXT}.")
    duration: float | None
    if fmt == "wav":
        duration = _wav_duration(data, subject)
    elif fmt in ("mp3", "mpga", "mp4", "m4a"):
        duration = _tag_duration(data)
    elif fmt == "webm":
        duration = _webm_duration(data)
    else:
        duration = None
    if duration == 0:
        raise InvalidInputError(f"{subject} is 0 seconds long; there is nothing to transcribe.")
    if duration is not None and duration > MAX_AUDIO_SECONDS:
        raise InvalidInputError(
            f"{subject} is {duration_text(duration)} long; audio may be at most 4 hours.")
    upload_name = subject if subject != THE_AUDIO else "audio"
    stem, dot, extension = upload_name.rpartition(".")
    if not dot or AUDIO_FAMILY.get(extension.lower()) != AUDIO_FAMILY[fmt]:
        upload_name = f"{stem if dot and stem else upload_name}.{fmt}"
    return CheckedAudio(name=upload_name, mime=AUDIO_MIME[fmt], size_bytes=len(data), data=data,
                        duration_seconds=duration, format=fmt)
