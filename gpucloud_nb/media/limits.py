"""The spec's limits on images and audio, and the bounds on the work a check may do.

Every number a check enforces is named here once, with the reading chosen where the spec is short
("20 MB" is decimal megabytes).

    >>> MAX_IMAGE_BYTES // MB
    20
"""

from __future__ import annotations

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
"""Largest image (in pixels) a :func:`thumbnail` decodes in full; JPEGs decode reduced instead."""

REENCODE_PIXELS = 40_000_000
"""The most pixels re-encoded (``convert``, ``max_side``, fitting under 20 MB): one RGBA copy of
40 million pixels is 160 MB, so a re-encode stays under 300 MB. A JPEG over it is decoded at
reduced scale when ``max_side`` allows; anything else over it is refused in one sentence."""

IMAGE_MIME = {"JPEG": "image/jpeg", "PNG": "image/png", "WEBP": "image/webp", "GIF": "image/gif"}
FORMATS_TEXT = "JPEG, PNG, WEBP or GIF"
AUDIO_TEXT = "mp3, mp4, mpeg, mpga, m4a, wav or webm"
AUDIO_MIME = {
    "wav": "audio/wav",
    "mp3": "audio/mpeg",
    "mpga": "audio/mpeg",
    "mpeg": "video/mpeg",
    "mp4": "audio/mp4",
    "m4a": "audio/mp4",
    "webm": "audio/webm",
}

AUDIO_FAMILY = {"wav": "wav", "mp3": "mpeg-audio", "mpga": "mpeg-audio", "mpeg": "mpeg",
                 "mp4": "mp4", "m4a": "mp4", "webm": "webm"}
"""Extensions that name the same content: a WAV named .mp3 is uploaded as .wav."""
