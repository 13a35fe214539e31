"""What a passed check returns: :class:`CheckedImage` and :class:`CheckedAudio`, ready to send.

    >>> CheckedAudio(name="a.wav", mime="audio/wav", size_bytes=4, data=b"RIFF",
    ...              duration_seconds=1.0, format="wav").name
    'a.wav'
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpucloud_nb.media.inputs import base64_url


class CheckedURL(str):
    """A ``data:`` URL made from a :class:`CheckedImage`: the client sends it as it is.

    The image was checked when the URL was made, so a chat that sends it again with every turn
    (its history) does not decode it again. Any other ``data:`` URL is decoded and checked.

        >>> isinstance(CheckedURL("data:image/png;base64,iVBO"), str)
        True
    """

    __slots__ = ()


@dataclass(frozen=True)
class CheckedImage:
    """An image that passed every check, ready to send.

    ``data`` holds the exact bytes that will be sent: the user's own bytes when nothing had to
    change, else the re-encoded image. ``changes`` lists what was done on request (``convert``,
    ``max_side``), empty when the bytes are the user's own.

        >>> checked = check_image("cat.png")  # doctest: +SKIP
        >>> checked.format, checked.width, checked.height, checked.mime  # doctest: +SKIP
        ('PNG', 640, 480, 'image/png')
        >>> checked.data_url()[:22]  # doctest: +SKIP
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

    def data_url(self) -> CheckedURL:
        """Return the image as a ``data:<mime>;base64,...`` URL (a :class:`CheckedURL`).

            >>> check_image(b"...png bytes...").data_url()[:22]  # doctest: +SKIP
            'data:image/png;base64,'
        """
        return CheckedURL(base64_url(f"data:{self.mime};base64,", self.data))


@dataclass(frozen=True)
class CheckedAudio:
    """An audio file that passed every check, ready to upload.

    ``name`` is the file name to upload under: the user's own name when its extension is one the
    service takes, else the name with the extension of the format found in the content (a
    recording given as bytes is sent as ``audio.wav``, ``audio.mp3``, ...). ``duration_seconds``
    is ``None`` when the format's header does not tell it.

        >>> audio = check_audio("talk.wav")  # doctest: +SKIP
        >>> audio.name, audio.format, audio.mime, audio.duration_seconds  # doctest: +SKIP
        ('talk.wav', 'wav', 'audio/wav', 12.5)
    """

    name: str
    mime: str
    size_bytes: int
    data: bytes = field(repr=False)
    duration_seconds: float | None
    format: str
