"""Checks on images and audio before anything is sent to an inference endpoint.

Every check here reads only the user's own file (or bytes, or in-memory image) and either returns
something the spec's limits accept or raises :class:`~gpucloud_nb.errors.InvalidInputError` with
one sentence naming the file, the limit and the value. Nothing is changed silently: an image is
converted, re-encoded or downscaled only when ``convert=True`` or ``max_side`` asks for it.

    >>> from gpucloud_nb.media import image_data_url, check_audio
    >>> image_data_url("cat.jpg")[:30]  # doctest: +SKIP
    'data:image/jpeg;base64,/9j/4AAQ'
    >>> image_data_url("scan.bmp")  # doctest: +SKIP
    InvalidInputError: scan.bmp is a BMP image; send JPEG, PNG, WEBP or GIF, or pass
    convert=True to convert it.
    >>> check_audio("talk.wav").duration_seconds  # doctest: +SKIP
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

from gpucloud_nb.media.audio import check_audio
from gpucloud_nb.media.images import check_image, image_data_url, thumbnail
from gpucloud_nb.media.inputs import AudioInput, ImageInput, parse_data_url
from gpucloud_nb.media.limits import (
    AUDIO_FORMATS,
    IMAGE_FORMATS,
    JPEG_QUALITY,
    MAX_AUDIO_BYTES,
    MAX_AUDIO_SECONDS,
    MAX_DECODED_PIXELS,
    MAX_FRAMES,
    MAX_IMAGE_BYTES,
    MB,
    REENCODE_PIXELS,
    THUMBNAIL_PIXELS,
)
from gpucloud_nb.media.results import CheckedAudio, CheckedImage, CheckedURL

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
    "THUMBNAIL_PIXELS",
    "AudioInput",
    "CheckedAudio",
    "CheckedImage",
    "CheckedURL",
    "ImageInput",
    "check_audio",
    "check_image",
    "image_data_url",
    "parse_data_url",
    "thumbnail",
]
