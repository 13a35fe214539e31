"""Checking an image with Pillow before it is sent: format by content, size, completeness,
decompression bombs, and a bounded :func:`thumbnail`.

    >>> image_data_url("cat.jpg")[:30]  # doctest: +SKIP
    'data:image/jpeg;base64,/9j/4AAQ'
"""

from __future__ import annotations

import io
import os
import re
import warnings

from PIL import Image, ImageOps, UnidentifiedImageError

from gpucloud_nb.errors import InvalidInputError
from gpucloud_nb.media._reencode import encode, encode_animation, flatten, reencode, within_reencode_budget
from gpucloud_nb.media._structure import (
    check_complete,
    check_decode_budget,
    png_trailing_bytes,
    strict_decoding,
)
from gpucloud_nb.media.inputs import (
    THE_IMAGE,
    ImageInput,
    article,
    content_hint,
    is_remote_url,
    parse_data_url,
    read_input,
    size_text,
)
from gpucloud_nb.media.limits import (
    FORMATS_TEXT,
    IMAGE_FORMATS,
    IMAGE_MIME,
    MAX_IMAGE_BYTES,
    THUMBNAIL_PIXELS,
)
from gpucloud_nb.media.results import CheckedImage

__all__ = ["check_image", "image_data_url", "thumbnail"]


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
            what = "in a format Pillow can read" if subject == THE_IMAGE else (
                "an image Pillow can read")
            raise InvalidInputError(
                f"{subject} is not {what} ({content_hint(data)}); use {FORMATS_TEXT}.") from None
        except Exception as error:  # Pillow raises many types on a malformed header
            raise InvalidInputError(f"{subject} is truncated or damaged, so it cannot be sent "
                                    f"(Pillow could not open it: {error}).") from None


def _real_format(image: Image.Image) -> str:
    """The format by content; camera MPO files are JPEG files with extra pictures appended."""
    fmt = (image.format or "").upper()
    return "JPEG" if fmt == "MPO" else fmt


def _load_strict(image: Image.Image, subject: str) -> None:
    try:
        with strict_decoding():
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
        value, limit = size_text(len(data), MAX_IMAGE_BYTES)
        raise InvalidInputError(
            f"{subject} is {value}; images may be at most {limit} "
            "(pass convert=True to re-encode it as JPEG).")
    image = _open_image(data, subject)
    with image:
        fmt = _real_format(image)
        width, height = image.size
        check_decode_budget(data, image, fmt, subject)
        if fmt not in IMAGE_FORMATS:
            if not convert:
                raise InvalidInputError(
                    f"{subject} is {article(fmt)} {fmt} image; send {FORMATS_TEXT}, "
                    "or pass convert=True to convert it.")
            within_reencode_budget(image, subject, max_side)
            _load_strict(image, subject)
            return reencode(image, subject, name, source_format=fmt, purpose="convert",
                             max_side=max_side, convert=True, transpose=True)
        check_complete(data, image, fmt, subject)
    trailing = png_trailing_bytes(data) if fmt == "PNG" else 0
    if trailing and not convert:
        raise InvalidInputError(
            f"{subject} has {trailing:,} bytes after the end of its PNG data (another file may "
            "be appended to it); pass convert=True to send the picture alone.")
    if trailing and not too_big and not (max_side and max(width, height) > max_side):
        with _open_image(data, subject) as image:
            within_reencode_budget(image, subject, None)
            _load_strict(image, subject)
            return reencode(image, subject, name, source_format=fmt, purpose="downscale",
                             max_side=None, convert=True, transpose=False)
    if too_big or (max_side and max(width, height) > max_side):
        with _open_image(data, subject) as image:
            within_reencode_budget(image, subject, max_side)
            _load_strict(image, subject)
            return reencode(image, subject, name, source_format=fmt,
                             purpose="fit" if too_big else "downscale", max_side=max_side,
                             convert=convert, transpose=True)
    return CheckedImage(name=name, format=fmt, mime=IMAGE_MIME[fmt], width=width,
                        height=height, size_bytes=len(data), data=data)


def _check_pil_image(image: Image.Image, subject: str, name: str | None, *, convert: bool,
                     max_side: int | None) -> CheckedImage:
    """Encode an in-memory image in its own format when allowed, else as PNG."""
    fmt = _real_format(image)
    target = fmt if fmt in IMAGE_FORMATS else "PNG"
    _load_strict(image, subject)
    if max_side and max(image.size) > max_side:
        return reencode(image, subject, name, source_format=target, purpose="downscale",
                         max_side=max_side, convert=convert, transpose=False)
    if target == "JPEG":
        try:  # an unmodified JPEG keeps its own quantisation tables
            data = encode(image, "JPEG", quality="keep")
        except (ValueError, OSError):
            data = encode(flatten(image), "JPEG")
    elif getattr(image, "is_animated", False):
        data = encode_animation(image, target, image.size)
    else:
        data = encode(image, target)
    if len(data) > MAX_IMAGE_BYTES:
        if not convert:
            value, limit = size_text(len(data), MAX_IMAGE_BYTES)
            raise InvalidInputError(
                f"{subject} is {value} once encoded as {target}; images may be at most {limit} "
                "(pass convert=True to re-encode it as JPEG).")
        return reencode(image, subject, name, source_format=target, purpose="fit",
                         max_side=None, convert=True, transpose=False)
    return CheckedImage(name=name, format=target, mime=IMAGE_MIME[target], width=image.width,
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

        >>> info = check_image("photo.jpg", max_side=1024)  # doctest: +SKIP
        >>> info.format, info.width, info.height, info.changes  # doctest: +SKIP
        ('JPEG', 1024, 683, ('downscaled from 6000×4000 to 1024×683',))

    Raises :class:`InvalidInputError` with one sentence naming the file, the limit and the value.
    """
    _check_max_side(max_side)
    if isinstance(image, Image.Image):
        filename = getattr(image, "filename", "") or ""
        name = name or (os.path.basename(filename) if isinstance(filename, str) else "") or None
        return _check_pil_image(image, name or THE_IMAGE, name, convert=convert,
                                max_side=max_side)
    limit = None if convert else MAX_IMAGE_BYTES
    if isinstance(image, str) and is_remote_url(image):
        raise InvalidInputError(
            f"{image} is a web address; only local images can be checked "
            "(image_data_url passes web addresses through unchanged).")
    if isinstance(image, str) and image[:5].lower() == "data:":
        subject = name or THE_IMAGE
        estimate = (len(image) - image.find(",") - 1) * 3 // 4  # an upper bound of the bytes
        if limit is not None and estimate > limit + 3 and ";base64" in image[:100].lower():
            _, _, payload = image.partition(",")
            estimate = len("".join(payload.split()).rstrip("=")) * 3 // 4
        if limit is not None and estimate > limit and ";base64" in image[:100].lower():
            value, limit_text = size_text(estimate, MAX_IMAGE_BYTES)
            raise InvalidInputError(
                f"{subject} is {value}; images may be at most {limit_text} "
                "(pass convert=True to re-encode it as JPEG).")
        _, data = parse_data_url(image)
        size = len(data)
    elif (read := read_input(image, name, generic=THE_IMAGE, what="an image",
                             limit=limit)) is not None:
        data, subject, size = read
    else:
        raise TypeError(
            "image must be a path, bytes, a binary file, a data: URL or a PIL.Image.Image, "
            f"not {type(image).__name__}.")
    if not data and size > 0:  # refused by its size before reading it
        value, limit_text = size_text(size, MAX_IMAGE_BYTES)
        raise InvalidInputError(
            f"{subject} is {value}; images may be at most {limit_text} "
            "(pass convert=True to re-encode it as JPEG).")
    return _check_image_bytes(data, subject, None if subject == THE_IMAGE else subject,
                              convert=convert, max_side=max_side)


def image_data_url(image: ImageInput, *, convert: bool = False, max_side: int | None = None,
                   name: str | None = None) -> str:
    """Return ``image`` as a checked ``data:image/...;base64,`` URL for a chat message.

    Takes what :func:`check_image` takes and applies the same checks and options. An
    ``http://`` or ``https://`` address is returned unchanged (the server fetches it); a
    ``data:`` URL is decoded, checked like bytes, and rebuilt with the MIME type of its real
    format. ``convert`` and ``max_side`` do not apply to web addresses.

        >>> image_data_url("cat.png")[:22]  # doctest: +SKIP
        'data:image/png;base64,'
        >>> image_data_url("https://example.com/cat.png")
        'https://example.com/cat.png'
        >>> image_data_url("scan.bmp", convert=True)[:22]  # doctest: +SKIP
        'data:image/png;base64,'
    """
    if isinstance(image, str) and is_remote_url(image):
        return image
    return check_image(image, convert=convert, max_side=max_side, name=name).data_url()


def thumbnail(data: bytes, side: int) -> tuple[bytes, str] | None:
    """A small PNG (with transparency) or JPEG of a checked image's first frame, or ``None``.

    Memory stays bounded whatever the image: a JPEG is decoded at reduced scale
    (``Image.draft``), any other format only when it has at most :data:`THUMBNAIL_PIXELS`
    pixels; a larger one gets no thumbnail (``None``) rather than a full decode.

        >>> thumbnail(check_image("cat.png").data, 96)[1]  # doctest: +SKIP
        'png'
    """
    with _open_image(data, THE_IMAGE) as image:
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
