"""gpucloud_nb.sandbox.vision: the sandbox's deterministic vision model really reads its input."""

from __future__ import annotations

import base64
import io

import numpy as np
import pytest
from PIL import Image

from gpucloud_nb.media import image_data_url
from gpucloud_nb.sandbox.vision import MODEL_ID, MODELS, describe, dominant_colours, tokens


def _url(image: Image.Image, fmt: str) -> str:
    buffer = io.BytesIO()
    image.save(buffer, fmt)
    return image_data_url(buffer.getvalue())


def _user(*parts: dict | str) -> dict:
    content = [{"type": "text", "text": p} if isinstance(p, str) else p for p in parts]
    return {"role": "user", "content": content}


def _image(url: str) -> dict:
    return {"type": "image_url", "image_url": {"url": url}}


def test_red_png_and_blue_jpeg_are_measured() -> None:
    red = _url(Image.new("RGB", (64, 48), (255, 0, 0)), "PNG")
    blue = _url(Image.new("RGB", (80, 60), (0, 0, 255)), "JPEG")
    reply = describe([_user("What colours are these?", _image(red), _image(blue))])
    assert "Image 1 is a PNG image of 64×48 pixels" in reply
    assert "red (#FF0000, 100%)" in reply
    assert "Image 2 is a JPEG image of 80×60 pixels" in reply
    second = reply[reply.index("Image 2"):]
    assert "blue (#0000F" in second and "red" not in second.split(".")[0]


def test_several_colours_are_ranked_by_share() -> None:
    pixels = np.zeros((100, 100, 3), np.uint8)
    pixels[:50] = (255, 255, 255)
    pixels[50:, :30] = (0, 128, 0)
    pixels[50:, 30:] = (255, 255, 0)
    colours = dominant_colours(Image.fromarray(pixels))
    assert [name for name, _, _ in colours] == ["white", "yellow", "green"]
    assert [share for _, _, share in colours] == pytest.approx([0.5, 0.35, 0.15], abs=0.01)
    assert colours[0][1] == "#FFFFFF"


def test_transparent_pixels_count_as_white() -> None:
    image = Image.new("RGBA", (10, 10), (0, 0, 0, 0))
    assert dominant_colours(image) == [("white", "#FFFFFF", 1.0)]


def test_reply_quotes_prompt_counts_words_and_history() -> None:
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hello there"},
        {"role": "assistant", "content": "Hi!"},
        {"role": "user", "content": "What is 12 * 7?"},
    ]
    reply = describe(messages)
    assert "“What is 12 * 7?” (4 words, 15 characters)" in reply
    assert "12 × 7 = 84." in reply
    assert "This conversation has 4 messages: 2 from you and 1 from the assistant" in reply
    assert len(tokens(reply)) > 20  # long enough to stream


@pytest.mark.parametrize("prompt,answer", [("what is 2+2", "2 + 2 = 4."),
                                           ("compute (3+4)*2", "(3 + 4) × 2 = 14."),
                                           ("10/4", "10 / 4 = 2.5."),
                                           ("1/0?", "divides by zero")])
def test_simple_arithmetic(prompt: str, answer: str) -> None:
    assert answer in describe([{"role": "user", "content": prompt}])


def test_numbers_that_are_not_sums_are_left_alone() -> None:
    reply = describe([{"role": "user", "content": "Call 555-1234 about the 1990-2000 files"}])
    assert " = " not in reply


def test_remote_and_broken_images_are_explained() -> None:
    reply = describe([_user(_image("https://example.com/cat.png"),
                            _image("data:image/png;base64,AAAA"),
                            _image("data:image/png;base64,@@"))])
    assert "You sent 3 images and no text." in reply
    assert "can't fetch remote images in the sandbox" in reply
    assert "Image 2 is not in an image format Pillow can read." in reply
    assert "Image 3 could not be read: the data: URL is not valid base64." in reply


def test_reply_is_deterministic() -> None:
    url = _url(Image.new("RGB", (20, 20), (0, 200, 0)), "PNG")
    messages = [_user("Describe", _image(url), _image("data:image/png;base64,AAAA"))]
    assert describe(messages) == describe([dict(m) for m in messages])


def test_earlier_images_are_counted_and_string_content_read() -> None:
    url = _url(Image.new("RGB", (4, 4)), "PNG")
    reply = describe([_user("first", _image(url)), {"role": "assistant", "content": "ok"},
                      {"role": "user", "content": "and now?"}])
    assert "Earlier messages carried 1 image" in reply
    assert "“and now?” (2 words" in reply


def test_empty_conversation() -> None:
    assert describe([]).startswith("There is no user message for me to answer yet.")


def test_animated_gif_frames_are_reported() -> None:
    frames = [Image.new("RGB", (8, 8), c) for c in ("red", "green", "blue")]
    buffer = io.BytesIO()
    frames[0].save(buffer, "GIF", save_all=True, append_images=frames[1:])
    url = "data:image/gif;base64," + base64.b64encode(buffer.getvalue()).decode()
    assert "animated with 3 frames" in describe([_user(_image(url))])


@pytest.mark.parametrize("text", ["", "one", "Hello,  world!\n", "  leading and trailing  ",
                                  "tabs\tand\nnewlines\n\n", "émoji 🙂 ok"])
def test_tokens_round_trip(text: str) -> None:
    pieces = tokens(text)
    assert "".join(pieces) == text
    assert all(piece for piece in pieces)


def test_tokens_are_words_with_leading_space() -> None:
    assert tokens("Hello big world") == ["Hello", " big", " world"]


def test_model_records() -> None:
    assert MODEL_ID == "sandbox-vision-1"
    assert MODELS[0]["id"] == MODEL_ID and MODELS[0]["object"] == "model"
