"""Re-encoding an image on request: ``convert`` to PNG or JPEG, ``max_side`` downscaling, and
fitting under 20 MB, within a bounded number of pixels.

    >>> reencode(image, "cat.bmp", None, source_format="BMP", purpose="convert",  # doctest: +SKIP
    ...          max_side=None, convert=True, transpose=True).format
    'PNG'
"""

from __future__ import annotations

import io

from PIL import Image, ImageOps, ImageSequence

from gpucloud_nb.errors import InvalidInputError
from gpucloud_nb.media.inputs import size_text
from gpucloud_nb.media.limits import IMAGE_MIME, JPEG_QUALITY, MAX_IMAGE_BYTES, MB, REENCODE_PIXELS
from gpucloud_nb.media.results import CheckedImage


def _has_alpha(image: Image.Image) -> bool:
    return image.mode in ("RGBA", "LA", "PA", "La", "RGBa") or (
        image.mode == "P" and "transparency" in image.info)


def flatten(image: Image.Image) -> Image.Image:
    """An RGB (or L) copy of ``image``; transparent parts go on white, as JPEG has no alpha."""
    if image.mode in ("RGB", "L"):
        return image
    if _has_alpha(image):
        rgba = image.convert("RGBA")
        background = Image.new("RGB", rgba.size, (255, 255, 255))
        background.paste(rgba, mask=rgba.getchannel("A"))
        return background
    return image.convert("RGB")


def encode(image: Image.Image, fmt: str, *, quality: int | str = JPEG_QUALITY) -> bytes:
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


def encode_animation(image: Image.Image, fmt: str, size: tuple[int, int]) -> bytes:
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
    work = flatten(image)
    downscaled = False
    for _ in range(10):
        data = encode(work, "JPEG")
        if len(data) <= MAX_IMAGE_BYTES:
            return data, work.size, downscaled
        scale = min(0.9, (MAX_IMAGE_BYTES / len(data)) ** 0.5 * 0.95)
        size = (max(1, int(work.width * scale)), max(1, int(work.height * scale)))
        work = work.resize(size, Image.Resampling.LANCZOS)
        downscaled = True
    value, limit = size_text(len(data), MAX_IMAGE_BYTES)
    raise InvalidInputError(
        f"{subject} is still {value} as a JPEG; images may be at most {limit}.")


def within_reencode_budget(image: Image.Image, subject: str, max_side: int | None) -> None:
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


def reencode(image: Image.Image, subject: str, name: str | None, *, source_format: str,
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
        data = encode_animation(image, fmt, size) if animated else encode(work, fmt)
        if purpose == "convert":
            changes.append(f"converted from {source_format} to PNG")
        if len(data) > MAX_IMAGE_BYTES and not convert:
            value, limit = size_text(len(data), MAX_IMAGE_BYTES)
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
    return CheckedImage(name=name, format=fmt, mime=IMAGE_MIME[fmt], width=size[0],
                        height=size[1], size_bytes=len(data), data=data, changes=tuple(changes))
