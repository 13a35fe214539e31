"""gpucloud_nb.media: every image and audio check, on real files generated with Pillow."""

from __future__ import annotations

import base64
import io
import struct
import warnings
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageFile
from samples import silent_wav

from gpucloud_nb import media
from gpucloud_nb.errors import InvalidInputError
from gpucloud_nb.media import (
    MAX_AUDIO_BYTES,
    MAX_IMAGE_BYTES,
    check_audio,
    check_image,
    image_data_url,
    parse_data_url,
)

# --------------------------------------------------------------------------------------------
# Helpers: real files, made in tmp_path


def _save(image: Image.Image, path: Path, fmt: str | None = None, **options: object) -> Path:
    image.save(path, fmt, **options)
    return path


def _photo(width: int = 320, height: int = 240, seed: int = 0) -> Image.Image:
    """A photo-like RGB image: a gradient with noise, so JPEG has real work to do."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    base = np.stack([x * 255 // width, y * 255 // height, (x + y) * 255 // (width + height)], -1)
    noisy = np.clip(base + rng.integers(-25, 25, (height, width, 3)), 0, 255)
    return Image.fromarray(noisy.astype(np.uint8))


def _data_url_bytes(url: str) -> bytes:
    return base64.b64decode(url.split(",", 1)[1])


@pytest.fixture
def jpeg(tmp_path: Path) -> Path:
    return _save(_photo(), tmp_path / "photo.jpg", quality=90)


@pytest.fixture
def png(tmp_path: Path) -> Path:
    return _save(Image.new("RGBA", (64, 48), (255, 0, 0, 255)), tmp_path / "red.png")


@pytest.fixture(scope="module")
def big_png(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An uncompressed PNG of noise, just over 21 MB (written fast with compress_level=0)."""
    rng = np.random.default_rng(1)
    pixels = rng.integers(0, 256, (2650, 2650, 3), dtype=np.uint8)
    path = _save(Image.fromarray(pixels), tmp_path_factory.mktemp("big") / "big.png",
                 compress_level=0)
    assert path.stat().st_size > 21_000_000
    return path


def _wav_bytes(*, rate: int = 16000, channels: int = 1, bits: int = 16, frames: int = 16000,
               fill: bytes | None = None) -> bytes:
    block = channels * bits // 8
    body = (fill or b"\x00") * (frames * block) if fill is None or len(fill) == 1 else fill
    header = b"RIFF" + struct.pack("<I", 36 + len(body)) + b"WAVE"
    fmt = b"fmt " + struct.pack("<IHHIIHH", 16, 1, channels, rate, rate * block, block, bits)
    return header + fmt + b"data" + struct.pack("<I", len(body)) + body


# --------------------------------------------------------------------------------------------
# Accepted images: bytes untouched, every input form


def test_jpeg_path_is_sent_byte_for_byte(jpeg: Path) -> None:
    checked = check_image(jpeg)
    assert (checked.format, checked.mime, checked.width, checked.height) == (
        "JPEG", "image/jpeg", 320, 240)
    assert checked.data == jpeg.read_bytes()
    assert checked.size_bytes == jpeg.stat().st_size
    assert checked.changes == ()
    assert checked.name == "photo.jpg"
    url = image_data_url(jpeg)
    assert url.startswith("data:image/jpeg;base64,")
    assert _data_url_bytes(url) == jpeg.read_bytes()
    assert url == "data:image/jpeg;base64," + base64.b64encode(jpeg.read_bytes()).decode()


def test_every_input_form_is_accepted(png: Path) -> None:
    raw = png.read_bytes()
    expected = image_data_url(png)
    assert image_data_url(str(png)) == expected
    assert image_data_url(raw) == expected
    assert image_data_url(bytearray(raw)) == expected
    assert image_data_url(memoryview(raw)) == expected
    with png.open("rb") as file:
        assert image_data_url(file) == expected
    assert image_data_url(expected) == expected  # a data: URL is checked and rebuilt
    with Image.open(png) as image:
        assert _data_url_bytes(image_data_url(image)).startswith(b"\x89PNG")


@pytest.mark.parametrize("fmt,mime", [("PNG", "image/png"), ("WEBP", "image/webp"),
                                      ("GIF", "image/gif"), ("JPEG", "image/jpeg")])
def test_all_four_formats(tmp_path: Path, fmt: str, mime: str) -> None:
    path = _save(_photo(40, 30), tmp_path / f"x.{fmt.lower()}", fmt)
    checked = check_image(path)
    assert (checked.format, checked.mime, checked.data) == (fmt, mime, path.read_bytes())


def test_format_is_read_from_content_not_name(tmp_path: Path) -> None:
    path = _save(_photo(40, 30), tmp_path / "really_a_jpeg.png", "JPEG")
    assert image_data_url(path).startswith("data:image/jpeg;base64,")


def test_data_url_with_wrong_mime_is_rebuilt_with_real_one(png: Path) -> None:
    url = "data:image/jpeg;base64," + base64.b64encode(png.read_bytes()).decode()
    assert image_data_url(url).startswith("data:image/png;base64,")


@pytest.mark.parametrize("url", ["https://example.com/cat.png", "http://example.com/a.jpg",
                                 "HTTPS://EXAMPLE.COM/B.GIF"])
def test_web_addresses_pass_through_unchanged(url: str) -> None:
    assert image_data_url(url) is url
    with pytest.raises(InvalidInputError, match="web address"):
        check_image(url)


def test_in_memory_images(tmp_path: Path) -> None:
    created = Image.new("RGB", (30, 20), "green")  # no format: PNG
    checked = check_image(created)
    assert (checked.format, checked.width, checked.height, checked.name) == ("PNG", 30, 20, None)
    path = _save(_photo(60, 40), tmp_path / "p.jpg", quality=90)
    with Image.open(path) as opened:  # its own format, quality kept
        checked = check_image(opened)
        assert (checked.format, checked.name) == ("JPEG", "p.jpg")
        with Image.open(io.BytesIO(checked.data)) as again:
            assert again.format == "JPEG" and again.size == (60, 40)
    cmyk = Image.new("CMYK", (10, 10))
    assert check_image(cmyk).format == "PNG"


# --------------------------------------------------------------------------------------------
# Refusals: not an image, damaged, wrong format, too big, bombs


def test_text_renamed_png_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "cat.png"
    path.write_text("This is not a picture of a cat.\n")
    with pytest.raises(InvalidInputError) as caught:
        image_data_url(path)
    assert str(caught.value) == (
        "cat.png is not an image Pillow can read (it looks like text); "
        "use JPEG, PNG, WEBP or GIF.")


@pytest.mark.parametrize("content,hint", [(b"%PDF-1.7\n...", "it is a PDF document"),
                                          (b"PK\x03\x04rest", "it is a ZIP archive"),
                                          (b"<svg xmlns='x'></svg>", "it is an SVG drawing"),
                                          (bytes(range(256)) * 4, "not a format Pillow knows")])
def test_non_images_are_named(content: bytes, hint: str) -> None:
    with pytest.raises(InvalidInputError, match=hint) as caught:
        check_image(content)
    assert str(caught.value).startswith("The image is not in a format Pillow can read (")


def test_missing_file_and_folder(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError) as caught:
        check_image(tmp_path / "photo.png", name="photo.png")
    assert str(caught.value) == "photo.png does not exist."
    with pytest.raises(InvalidInputError, match=r"does not exist\.$"):
        image_data_url(str(tmp_path / "nope.jpg"))
    with pytest.raises(InvalidInputError, match="is a folder"):
        check_image(tmp_path)


def test_empty_image() -> None:
    with pytest.raises(InvalidInputError, match=r"^The image is empty\.$"):
        check_image(b"")


@pytest.mark.parametrize("progressive", [False, True])
def test_truncated_jpeg_is_refused(tmp_path: Path, progressive: bool) -> None:
    whole = _save(_photo(), tmp_path / "whole.jpg", quality=90, progressive=progressive)
    data = whole.read_bytes()
    cut = tmp_path / "cut.jpg"
    cut.write_bytes(data[: int(len(data) * 0.7)])
    with Image.open(cut) as image:  # Pillow opens it: the header is intact
        assert image.size == (320, 240)
    with pytest.raises(InvalidInputError) as caught:
        check_image(cut)
    assert str(caught.value).startswith("cut.jpg is truncated or damaged")
    # Cut just before the end-of-image marker: still refused.
    with pytest.raises(InvalidInputError, match="truncated"):
        check_image(data[:-2])


def test_jpeg_with_trailing_data_is_accepted(jpeg: Path) -> None:
    data = jpeg.read_bytes() + b"\x00" * 100 + b"trailer"  # phones append data after EOI
    assert check_image(data).data == data


@pytest.mark.parametrize("fmt", ["PNG", "GIF", "WEBP"])
def test_truncated_png_gif_webp_are_refused(fmt: str) -> None:
    buffer = io.BytesIO()
    _photo(120, 90).save(buffer, fmt)
    data = buffer.getvalue()
    with pytest.raises(InvalidInputError, match="truncated or damaged"):
        check_image(data[: len(data) * 2 // 3])


def test_damaged_png_byte_is_refused_by_crc() -> None:
    buffer = io.BytesIO()
    _photo(60, 40).save(buffer, "PNG")
    data = bytearray(buffer.getvalue())
    idat = data.index(b"IDAT")
    data[idat + 20] ^= 0xFF
    with pytest.raises(InvalidInputError, match="truncated or damaged"):
        check_image(bytes(data))


def test_truncation_is_refused_even_if_the_user_allows_truncated_images(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ImageFile, "LOAD_TRUNCATED_IMAGES", True)
    buffer = io.BytesIO()
    _photo(120, 90).save(buffer, "GIF")
    with pytest.raises(InvalidInputError, match="truncated"):
        check_image(buffer.getvalue()[:-300])
    assert ImageFile.LOAD_TRUNCATED_IMAGES is True  # the user's setting is restored


def test_bmp_refused_then_converted(tmp_path: Path) -> None:
    path = _save(Image.new("RGB", (50, 40), (10, 200, 30)), tmp_path / "scan.bmp")
    with pytest.raises(InvalidInputError) as caught:
        image_data_url(path)
    assert str(caught.value) == (
        "scan.bmp is a BMP image; send JPEG, PNG, WEBP or GIF, or pass convert=True to convert it.")
    checked = check_image(path, convert=True)
    assert (checked.format, checked.width, checked.height) == ("PNG", 50, 40)
    assert checked.changes == ("converted from BMP to PNG",)
    with Image.open(io.BytesIO(checked.data)) as converted:
        assert converted.convert("RGB").getpixel((5, 5)) == (10, 200, 30)
    assert image_data_url(path, convert=True).startswith("data:image/png;base64,")


def test_tiff_named_png_is_refused_by_its_real_format(tmp_path: Path) -> None:
    path = _save(Image.new("RGB", (8, 8)), tmp_path / "fake.png", "TIFF")
    with pytest.raises(InvalidInputError, match=r"^fake\.png is a TIFF image; "):
        check_image(path)


def test_image_over_20_mb_is_refused_with_size_and_limit(big_png: Path) -> None:
    with pytest.raises(InvalidInputError) as caught:
        image_data_url(big_png)
    size = big_png.stat().st_size / 1e6
    assert str(caught.value) == (
        f"big.png is {size:.1f} MB; images may be at most 20 MB "
        "(pass convert=True to re-encode it as JPEG).")
    with pytest.raises(InvalidInputError, match=r"^The image is 2\d\.\d MB; images may be at most"):
        check_image(big_png.read_bytes())


def test_image_over_20_mb_is_reencoded_as_jpeg_with_convert(big_png: Path) -> None:
    checked = check_image(big_png, convert=True)
    assert checked.format == "JPEG" and checked.mime == "image/jpeg"
    assert checked.size_bytes <= MAX_IMAGE_BYTES
    assert checked.changes[-1] == "re-encoded from PNG as JPEG (quality 85) to fit under 20 MB"
    with Image.open(io.BytesIO(checked.data)) as image:
        assert image.format == "JPEG"


def test_oversize_path_is_refused_before_reading(tmp_path: Path) -> None:
    path = tmp_path / "huge.jpg"
    with path.open("wb") as file:  # sparse: costs no disk
        file.truncate(MAX_IMAGE_BYTES + 1)
    with pytest.raises(InvalidInputError) as caught:
        check_image(path)
    assert str(caught.value) == (
        "huge.jpg is 20,000,001 bytes; images may be at most 20 MB (20,000,000 bytes) "
        "(pass convert=True to re-encode it as JPEG).")


def test_decompression_bomb_is_refused(tmp_path: Path) -> None:
    path = _save(Image.new("1", (10_000, 10_000)), tmp_path / "bomb.png")  # 100 Mpx, ~12 KB
    assert path.stat().st_size < 100_000
    filters = list(warnings.filters)
    with pytest.raises(InvalidInputError) as caught:
        check_image(path)
    assert str(caught.value).startswith(
        "bomb.png is 100,000,000 pixels; images may be at most 89,478,485 pixels")
    assert warnings.filters == filters  # the warnings filter is put back


def test_decompression_bomb_error_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    buffer = io.BytesIO()
    Image.new("L", (100, 100)).save(buffer, "PNG")
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)  # 10,000 px > 2 × limit: an error
    with pytest.raises(InvalidInputError, match="at most 1,000 pixels"):
        check_image(buffer.getvalue(), name="tiny.png")


def test_bad_data_urls() -> None:
    with pytest.raises(InvalidInputError, match="not valid base64"):
        image_data_url("data:image/png;base64,@@@@")
    with pytest.raises(InvalidInputError, match="no comma"):
        image_data_url("data:image/png;base64")
    assert parse_data_url("data:text/plain,a%20b") == ("text/plain", b"a b")


def test_wrong_type_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        check_image(12345)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------
# max_side: only when asked


def test_max_side_downscales_only_when_given_and_needed(jpeg: Path) -> None:
    assert check_image(jpeg).width == 320  # not given: untouched
    same = check_image(jpeg, max_side=320)
    assert same.data == jpeg.read_bytes() and same.changes == ()
    small = check_image(jpeg, max_side=100)
    assert (small.format, small.width, small.height) == ("JPEG", 100, 75)
    assert small.changes == ("downscaled from 320×240 to 100×75",)
    with Image.open(io.BytesIO(small.data)) as image:
        assert image.size == (100, 75)


def test_max_side_keeps_format_and_applies_exif_orientation(tmp_path: Path) -> None:
    exif = Image.Exif()
    exif[0x0112] = 6  # orientation: rotate 90° to display
    path = _save(_photo(200, 100), tmp_path / "turned.jpg", exif=exif.tobytes())
    checked = check_image(path, max_side=50)
    assert (checked.width, checked.height) == (25, 50)
    png = _save(_photo(200, 100), tmp_path / "wide.png")
    assert check_image(png, max_side=50).format == "PNG"


def test_max_side_on_in_memory_image_leaves_it_alone() -> None:
    image = Image.new("RGB", (400, 200), "blue")
    checked = check_image(image, max_side=100)
    assert (checked.width, checked.height) == (100, 50)
    assert image.size == (400, 200)


def test_animated_gif_keeps_its_frames_when_downscaled(tmp_path: Path) -> None:
    frames = [Image.new("RGB", (80, 80), colour) for colour in ("red", "green", "blue")]
    path = tmp_path / "anim.gif"
    frames[0].save(path, save_all=True, append_images=frames[1:], duration=100, loop=0)
    assert check_image(path).data == path.read_bytes()
    checked = check_image(path, max_side=40)
    with Image.open(io.BytesIO(checked.data)) as image:
        assert (image.format, image.size, image.n_frames) == ("GIF", (40, 40), 3)


@pytest.mark.parametrize("bad", [0, -5, 2.5, True])
def test_max_side_must_be_positive_int(jpeg: Path, bad: object) -> None:
    with pytest.raises(InvalidInputError, match="max_side must be a positive whole number"):
        check_image(jpeg, max_side=bad)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------
# Audio


def test_wav_is_accepted_with_duration(tmp_path: Path) -> None:
    path = tmp_path / "talk.wav"
    path.write_bytes(_wav_bytes(rate=16000, frames=40000))
    audio = check_audio(path)
    assert (audio.name, audio.format, audio.mime) == ("talk.wav", "wav", "audio/wav")
    assert audio.duration_seconds == pytest.approx(2.5)
    assert audio.data == path.read_bytes() and audio.size_bytes == len(audio.data)
    assert "data" not in repr(audio).replace("duration", "")  # bytes stay out of the repr


def test_audio_bytes_and_file_objects(tmp_path: Path) -> None:
    data = _wav_bytes(frames=8000)
    assert check_audio(data).name == "audio.wav"
    assert check_audio(data, name="voice.wave").name == "voice.wav"
    assert check_audio(data, name="clip").name == "clip.wav"
    path = tmp_path / "memo.wav"
    path.write_bytes(data)
    with path.open("rb") as file:
        audio = check_audio(file)
    assert audio.name == "memo.wav" and audio.duration_seconds == pytest.approx(0.5)
    with path.open("r", encoding="latin-1") as text_file, pytest.raises(
            InvalidInputError, match=r"binary mode"):
        check_audio(text_file)  # type: ignore[arg-type]


def test_text_file_as_audio_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("Meeting notes: nothing to hear here.\n")
    with pytest.raises(InvalidInputError) as caught:
        check_audio(path)
    assert str(caught.value) == (
        "notes.txt is not audio in a supported format (it looks like text); "
        "use mp3, mp4, mpeg, mpga, m4a, wav or webm.")
    with pytest.raises(InvalidInputError, match=r"^The audio is not in a supported format"):
        check_audio(b"just words")


@pytest.mark.parametrize("content,reason", [(b"fLaC\x00\x00\x00\x22" + bytes(40), "FLAC"),
                                            (b"OggS" + bytes(60), "Ogg"),
                                            (b"%PDF-1.4" + bytes(60), "PDF")])
def test_unsupported_audio_formats_are_named(content: bytes, reason: str) -> None:
    with pytest.raises(InvalidInputError, match=reason):
        check_audio(content, name="clip.ogg")


def test_audio_over_25_mb_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "long.wav"
    header = _wav_bytes(frames=0)
    with path.open("wb") as file:
        file.write(header)
        file.truncate(26_000_000)
    with pytest.raises(InvalidInputError) as caught:
        check_audio(path)
    assert str(caught.value) == "long.wav is 26.0 MB; audio files may be at most 25 MB."
    with path.open("rb") as file, pytest.raises(InvalidInputError, match="26.0 MB"):
        check_audio(file)
    with pytest.raises(InvalidInputError, match=r"^The audio is 25,000,001 bytes; .*at most 25 MB"):
        check_audio(b"RIFF" + bytes(MAX_AUDIO_BYTES - 3))


def test_wav_over_4_hours_is_refused() -> None:
    seconds = 4 * 3600 + 1
    data = _wav_bytes(rate=1000, bits=8, frames=seconds * 1000, fill=b"\x80")
    assert len(data) < MAX_AUDIO_BYTES  # under the size limit: the duration refuses it
    with pytest.raises(InvalidInputError) as caught:
        check_audio(data, name="night.wav")
    assert str(caught.value) == "night.wav is 4 h 0 min 1 s long; audio may be at most 4 hours."
    exactly = _wav_bytes(rate=1000, bits=8, frames=4 * 3600 * 1000, fill=b"\x80")
    assert check_audio(exactly).duration_seconds == 4 * 3600


def test_wav_claiming_more_data_than_it_has_uses_what_is_there() -> None:
    data = bytearray(_wav_bytes(rate=8000, frames=8000))
    data[40:44] = struct.pack("<I", 0x7FFFFFF0)  # says ~33 hours; holds one second
    assert check_audio(bytes(data)).duration_seconds == pytest.approx(1.0)


def _mp3_frames(count: int, id3: bool = False) -> bytes:
    header = b"\xff\xfb\x90\x44"  # MPEG-1 layer III, 128 kbit/s, 44.1 kHz: 417-byte frames
    frames = (header + bytes(413)) * count
    if id3:
        frames = b"ID3\x04\x00\x00\x00\x00\x00\x0a" + bytes(10) + frames
    return frames


@pytest.mark.parametrize("id3", [False, True])
def test_mp3_is_recognised_with_duration(id3: bool) -> None:
    audio = check_audio(_mp3_frames(200, id3=id3), name="song.mp3")
    assert (audio.format, audio.mime, audio.name) == ("mp3", "audio/mpeg", "song.mp3")
    assert audio.duration_seconds == pytest.approx(200 * 1152 / 44100, rel=0.01)


def test_an_mp3_tag_without_audio_frames_says_so() -> None:
    tag_only = b"ID3\x04\x00\x00\x00\x00\x00\x0a" + bytes(10) + b"\xff\xfb\x90\x44" + bytes(50)
    with pytest.raises(InvalidInputError, match=r"\(it has an MP3 tag but no audio frames after it\)"):
        check_audio(tag_only)


def test_a_cut_mp3_is_accepted_with_the_duration_of_what_is_there() -> None:
    audio = check_audio(_mp3_frames(200)[: 417 * 100], name="cut.mp3")
    assert audio.duration_seconds == pytest.approx(100 * 1152 / 44100, rel=0.02)


def _box(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I4s", 8 + len(body), kind) + body


def _m4a(seconds: int, brand: bytes = b"M4A ") -> bytes:
    mvhd = _box(b"mvhd", bytes(4) + struct.pack(">IIII", 0, 0, 1000, seconds * 1000) + bytes(80))
    return _box(b"ftyp", brand + bytes(4) + b"isom") + _box(b"moov", mvhd) + _box(b"mdat", bytes(64))


def test_m4a_and_mp4_are_recognised_with_duration() -> None:
    audio = check_audio(_m4a(90), name="voice.m4a")
    assert (audio.format, audio.mime, audio.duration_seconds) == ("m4a", "audio/mp4", 90)
    assert check_audio(_m4a(5, brand=b"isom")).name == "audio.mp4"
    with pytest.raises(InvalidInputError, match=r"5 h 0 min 0 s long"):
        check_audio(_m4a(5 * 3600), name="podcast.m4a")
    with pytest.raises(InvalidInputError, match="HEIF/AVIF image"):
        check_audio(_m4a(1, brand=b"heic"))


def _ebml(element_id: int, body: bytes) -> bytes:
    id_bytes = element_id.to_bytes((element_id.bit_length() + 7) // 8, "big")
    return id_bytes + bytes([0x01]) + len(body).to_bytes(7, "big") + body


def _webm(milliseconds: float, doctype: bytes = b"webm") -> bytes:
    header = _ebml(0x1A45DFA3, _ebml(0x4282, doctype))
    info = _ebml(0x1549A966, _ebml(0x2AD7B1, (1_000_000).to_bytes(3, "big"))
                 + _ebml(0x4489, struct.pack(">d", milliseconds)))
    return header + _ebml(0x18538067, info + _ebml(0x1F43B675, bytes(32)))


def test_an_mp4_whose_header_marks_the_duration_unknown_is_sent_without_one() -> None:
    mvhd = _box(b"mvhd", bytes(4) + struct.pack(">IIII", 0, 0, 1000, 0xFFFFFFFF) + bytes(80))
    data = _box(b"ftyp", b"M4A " + bytes(4) + b"isom") + _box(b"moov", mvhd) + _box(b"mdat", bytes(64))
    assert check_audio(data, name="live.m4a").duration_seconds is None


def test_webm_is_recognised_with_duration() -> None:
    audio = check_audio(_webm(12_500.0), name="rec.webm")
    assert (audio.format, audio.mime) == ("webm", "audio/webm")
    assert audio.duration_seconds == pytest.approx(12.5)
    with pytest.raises(InvalidInputError, match="at most 4 hours"):
        check_audio(_webm(5 * 3600 * 1000.0))
    with pytest.raises(InvalidInputError, match="Matroska"):
        check_audio(_webm(1000.0, doctype=b"matroska"), name="film.mkv")


def test_mpeg_program_stream_is_accepted_without_duration() -> None:
    audio = check_audio(b"\x00\x00\x01\xba" + bytes(100), name="clip.mpeg")
    assert (audio.format, audio.duration_seconds) == ("mpeg", None)


def test_missing_and_empty_audio(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match=r"^memo\.mp3 does not exist\.$"):
        check_audio(tmp_path / "memo.mp3", name="memo.mp3")
    empty = tmp_path / "empty.wav"
    empty.write_bytes(b"")
    with pytest.raises(InvalidInputError, match=r"^empty\.wav is empty\.$"):
        check_audio(empty)


def test_damaged_wav_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="damaged WAV"):
        check_audio(b"RIFF\x04\x00\x00\x00WAVE", name="broken.wav")


def test_limits_are_documented_decimal_megabytes() -> None:
    assert media.MB == 1_000_000
    assert (MAX_IMAGE_BYTES, MAX_AUDIO_BYTES) == (20_000_000, 25_000_000)
    assert media.MAX_AUDIO_SECONDS == 14_400


# -- bounded work: size before decoding, frame and pixel budgets, decisions on odd files -----


def _many_frame_gif(frames: int, screen: tuple[int, int] = (1, 1)) -> bytes:
    """A GIF of ``frames`` 1×1 frames on a ``screen``-sized canvas, built byte by byte (cheap)."""
    import struct as _struct

    head = b"GIF89a" + _struct.pack("<HHBBB", *screen, 0x80, 0, 0) + b"\0\0\0\xff\xff\xff"
    frame = b"\x2c" + _struct.pack("<HHHHB", 0, 0, 1, 1, 0) + b"\x02\x02\x44\x01\x00"
    return head + frame * frames + b"\x3b"


def test_a_gif_with_too_many_frames_is_refused_in_one_sentence() -> None:
    from gpucloud_nb.media import MAX_FRAMES

    check_image(_many_frame_gif(3))  # a small animation is fine
    with pytest.raises(InvalidInputError, match=f"more than {MAX_FRAMES:,} frames") as caught:
        check_image(_many_frame_gif(10_000))
    assert "\n" not in str(caught.value)


def test_a_gif_over_the_pixel_budget_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="animations may hold at most"):
        check_image(_many_frame_gif(200, screen=(2000, 2000)))


def test_oversize_bytes_are_refused_before_decoding(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_decoding(*args: object, **kwargs: object) -> None:
        raise AssertionError("opened before its size was checked")

    monkeypatch.setattr(media.images, "_open_image", no_decoding)
    data = _many_frame_gif(3)[:-1] + b"\0" * 20_000_001  # a GIF head, then junk
    with pytest.raises(InvalidInputError, match="images may be at most 20 MB"):
        check_image(data)


def test_an_oversize_data_url_is_refused_before_decoding(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_decoding(*args: object, **kwargs: object) -> None:
        raise AssertionError("decoded before its size was checked")

    url = "data:image/gif;base64," + "A" * 27_000_000
    monkeypatch.setattr(media.images, "parse_data_url", no_decoding)
    with pytest.raises(InvalidInputError, match="images may be at most 20 MB"):
        check_image(url)


def test_a_png_with_trailing_data_is_refused_unless_converted() -> None:
    buffer = io.BytesIO()
    Image.new("RGB", (4, 4), "red").save(buffer, "PNG")
    polyglot = buffer.getvalue() + b"PK\x03\x04 appended archive"
    with pytest.raises(InvalidInputError, match="bytes after the end of its PNG data"):
        check_image(polyglot)
    clean = check_image(polyglot, convert=True)
    assert clean.format == "PNG" and clean.data.endswith(b"IEND\xaeB`\x82")


def test_a_wav_named_mp3_is_uploaded_as_wav() -> None:
    audio = check_audio(silent_wav(0.2), name="talk.mp3")
    assert (audio.format, audio.mime, audio.name) == ("wav", "audio/wav", "talk.wav")


def test_a_zero_second_wav_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="0 seconds long"):
        check_audio(silent_wav(0), name="empty.wav")


def test_thumbnails_never_decode_a_huge_png_in_full() -> None:
    from gpucloud_nb.media import thumbnail

    buffer = io.BytesIO()
    Image.new("1", (9400, 9400)).save(buffer, "PNG")
    assert thumbnail(buffer.getvalue(), 96) is None
    buffer = io.BytesIO()
    Image.new("RGB", (3000, 2000), "blue").save(buffer, "JPEG")
    data, fmt = thumbnail(buffer.getvalue(), 96) or (b"", "")
    assert fmt == "jpeg" and max(Image.open(io.BytesIO(data)).size) <= 96


def test_re_encoding_a_huge_image_is_bounded() -> None:
    """max_side or convert on a 9400×9400 PNG would decode 265 MB: refused in one sentence."""
    buffer = io.BytesIO()
    Image.new("1", (9400, 9400)).save(buffer, "PNG")
    with pytest.raises(InvalidInputError, match="88 million pixels.*make it smaller first"):
        check_image(buffer.getvalue(), max_side=1024)


def test_a_huge_jpeg_is_downscaled_through_a_reduced_decode() -> None:
    buffer = io.BytesIO()
    Image.new("L", (9000, 5000), 128).save(buffer, "JPEG")
    checked = check_image(buffer.getvalue(), max_side=1000)
    assert max(checked.width, checked.height) == 1000
    assert Image.open(io.BytesIO(checked.data)).size == (checked.width, checked.height)
