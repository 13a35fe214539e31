"""The sandbox's built-in "vision model": a deterministic stand-in that really reads its input.

It is no language model. It answers from what it can measure: it quotes the last user prompt and
counts its words, works out simple arithmetic in it, says how long the conversation is, and for
each image gives the format, the pixel size and the dominant colours, measured with Pillow. The
same messages always give the same reply, so notebooks and tests can rely on it.

    >>> from gpucloud_nb.sandbox.vision import describe, tokens
    >>> reply = describe([{"role": "user", "content": "What is 2+2?"}])
    >>> "2 + 2 = 4" in reply
    True
    >>> "".join(tokens(reply)) == reply
    True

Pure functions, no HTTP: the sandbox's ``/v1/chat/completions`` route calls :func:`describe` and
streams :func:`tokens` of the reply.
"""

from __future__ import annotations

import ast
import base64
import binascii
import io
import operator
import re
import urllib.parse
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from PIL import Image, ImageOps

__all__ = ["MODELS", "MODEL_ID", "describe", "dominant_colours", "tokens"]

MODEL_ID = "sandbox-vision-1"
"""The model identifier the sandbox lists at ``/v1/models`` and accepts in chat requests."""

MODELS: tuple[dict[str, Any], ...] = (
    {"id": MODEL_ID, "object": "model", "created": 1_704_067_200, "owned_by": "gpucloud-sandbox"},
)
"""Model records in the shape a chat-completion client expects from ``GET /v1/models``."""

# Named colours for describing measured pixels; the nearest one (by weighted RGB distance) wins.
_COLOUR_NAMES: tuple[tuple[str, tuple[int, int, int]], ...] = (
    ("black", (0, 0, 0)),
    ("dark grey", (64, 64, 64)),
    ("grey", (128, 128, 128)),
    ("light grey", (192, 192, 192)),
    ("white", (255, 255, 255)),
    ("red", (255, 0, 0)),
    ("dark red", (139, 0, 0)),
    ("orange", (255, 140, 0)),
    ("yellow", (255, 255, 0)),
    ("olive", (128, 128, 0)),
    ("green", (0, 128, 0)),
    ("green", (0, 255, 0)),
    ("dark green", (0, 64, 0)),
    ("teal", (0, 128, 128)),
    ("cyan", (0, 255, 255)),
    ("light blue", (135, 206, 250)),
    ("blue", (0, 0, 255)),
    ("navy", (0, 0, 128)),
    ("purple", (128, 0, 128)),
    ("magenta", (255, 0, 255)),
    ("pink", (255, 182, 193)),
    ("brown", (139, 69, 19)),
    ("beige", (245, 222, 179)),
)

_MAX_ANALYSED_PIXELS = 50_000_000
_WORD = re.compile(r"\w+(?:['’.-]\w+)*")
_QUOTE_LIMIT = 200


def tokens(text: str) -> list[str]:
    """Split ``text`` into word-sized pieces for streaming; joined, they give ``text`` back.

    Each piece is a run of whitespace followed by a run of non-whitespace, like the tokens of a
    streamed chat reply.

        >>> tokens("Hello,  world!\\n")
        ['Hello,', '  world!', '\\n']
    """
    return re.findall(r"\s*\S+|\s+", text)


# --------------------------------------------------------------------------------------------
# Reading the messages


def _parts(content: Any) -> tuple[list[str], list[str]]:
    """The texts and image URLs of a message's ``content`` (a string or a list of parts)."""
    if isinstance(content, str):
        return [content], []
    texts: list[str] = []
    images: list[str] = []
    if isinstance(content, Sequence):
        for part in content:
            if not isinstance(part, Mapping):
                continue
            if part.get("type") == "text" and isinstance(part.get("text"), str):
                texts.append(part["text"])
            elif part.get("type") == "image_url":
                image_url = part.get("image_url")
                url = image_url.get("url") if isinstance(image_url, Mapping) else image_url
                images.append(url if isinstance(url, str) else "")
    return texts, images


def _plural(count: int, word: str, plural: str | None = None) -> str:
    return f"{count} {word if count == 1 else (plural or word + 's')}"


def _quote(text: str) -> str:
    text = " ".join(text.split())
    if len(text) > _QUOTE_LIMIT:
        text = text[: _QUOTE_LIMIT - 1].rstrip() + "…"
    return f"“{text}”"


# --------------------------------------------------------------------------------------------
# Arithmetic


_OPERATORS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_SYMBOLS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "×", ast.Div: "/", ast.FloorDiv: "//",
            ast.Mod: "%", ast.Pow: "^"}
_EXPRESSION = re.compile(r"[-+(]*\s*\d[\d.,\s]*(?:[-+*/×x÷^%()\s]+[\d.,]+\)*)+")


def _evaluate(node: ast.AST) -> float:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(
            node.value, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
        value = _evaluate(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Pow) and (abs(right) > 100 or abs(left) > 1e6):
            raise ValueError("power too large")
        return _OPERATORS[type(node.op)](left, right)
    raise ValueError("not arithmetic")


def _show(node: ast.AST) -> str:
    if isinstance(node, ast.Expression):
        return _show(node.body)
    if isinstance(node, ast.Constant):
        return str(node.value)
    if isinstance(node, ast.UnaryOp):
        return ("-" if isinstance(node.op, ast.USub) else "+") + _show(node.operand)
    if isinstance(node, ast.BinOp):
        left, right = _show(node.left), _show(node.right)
        if isinstance(node.left, ast.BinOp):
            left = f"({left})"
        if isinstance(node.right, ast.BinOp):
            right = f"({right})"
        return f"{left} {_SYMBOLS[type(node.op)]} {right}"
    return "?"


_CUES = re.compile(r"\b(what|what's|whats|calculate|compute|how much|solve|equals?)\b|=|\?",
                   re.IGNORECASE)


def _number(value: float) -> str:
    if isinstance(value, int) or (abs(value) < 1e15 and float(value).is_integer()):
        return str(int(value))
    return f"{value:.10g}"


def _arithmetic(text: str) -> str | None:
    """A sentence working out the first arithmetic expression in ``text``, if there is one.

    Only when the prompt asks for it ("what is", "compute", "=", a question mark) or is nothing
    but the expression, so that a date range or a phone number is left alone.
    """
    bare = text.strip().rstrip("?.!= ")
    if not _CUES.search(text) and not re.fullmatch(r"[-+*/×x÷^%().,\d\s]+", bare):
        return None
    for match in _EXPRESSION.finditer(text[:2000]):
        candidate = match.group().strip()
        if len(candidate) > 80:  # simple arithmetic only; keeps the parser's work small
            continue
        source = (candidate.replace("×", "*").replace("÷", "/").replace("^", "**")
                  .replace("x", "*").replace(",", ""))
        if not re.search(r"\d\s*(\*\*|//|[-+*/%])\s*[-+(]*\s*\d", source):
            continue
        try:
            tree = ast.parse(source.strip(), mode="eval")
            value = _evaluate(tree)
        except ZeroDivisionError:
            return f"{_show(tree)} has no answer: it divides by zero."
        except (SyntaxError, ValueError, OverflowError, TypeError, RecursionError):
            continue
        return f"{_show(tree)} = {_number(value)}."
    return None


# --------------------------------------------------------------------------------------------
# Images


def _nearest_colour(rgb: tuple[int, int, int]) -> str:
    """The name of the nearest named colour, by the "redmean" weighted RGB distance."""
    r, g, b = rgb

    def distance(named: tuple[int, int, int]) -> float:
        mean_r = (r + named[0]) / 2
        dr, dg, db = r - named[0], g - named[1], b - named[2]
        return (2 + mean_r / 256) * dr * dr + 4 * dg * dg + (2 + (255 - mean_r) / 256) * db * db

    return min(_COLOUR_NAMES, key=lambda item: distance(item[1]))[0]


def dominant_colours(image: Image.Image, *, count: int = 3,
                     min_share: float = 0.05) -> list[tuple[str, str, float]]:
    """The dominant colours of ``image`` as ``(name, hex, share)``, most frequent first.

    The image (its first frame; transparent parts on white) is reduced to at most 64×64 pixels,
    quantised to 8 colours with median cut, and the colours with the same nearest name are merged;
    ``hex`` is their pixel-weighted mean. Colours under ``min_share`` of the pixels are left out.

        >>> dominant_colours(Image.new("RGB", (10, 10), "red"))
        [('red', '#FF0000', 1.0)]
    """
    work = image.copy()
    work.thumbnail((256, 256), Image.Resampling.NEAREST)  # cheap first cut for big images
    if work.mode in ("RGBA", "LA", "PA") or (work.mode == "P" and "transparency" in work.info):
        rgba = work.convert("RGBA")
        work = Image.new("RGB", rgba.size, (255, 255, 255))
        work.paste(rgba, mask=rgba.getchannel("A"))
    else:
        work = work.convert("RGB")
    work = work.resize((min(work.width, 64), min(work.height, 64)), Image.Resampling.BOX)
    quantised = work.quantize(colors=8, method=Image.Quantize.MEDIANCUT)
    palette = quantised.getpalette() or []
    total = work.width * work.height
    groups: dict[str, list[int]] = {}
    for pixels, colour in quantised.getcolors() or []:
        index = int(colour)  # type: ignore[arg-type]  # a palette image counts palette indices
        rgb = (palette[3 * index], palette[3 * index + 1], palette[3 * index + 2])
        group = groups.setdefault(_nearest_colour(rgb), [0, 0, 0, 0])
        group[0] += pixels
        for channel in range(3):
            group[channel + 1] += rgb[channel] * pixels
    ranked = sorted(groups.items(), key=lambda item: (-item[1][0], item[0]))
    result = []
    for name, (pixels, red, green, blue) in ranked[:count]:
        share = pixels / total
        if share < min_share:
            break
        mean = (round(red / pixels), round(green / pixels), round(blue / pixels))
        result.append((name, "#{:02X}{:02X}{:02X}".format(*mean), round(share, 3)))
    return result


def _decode_data_url(url: str) -> bytes:
    header, comma, payload = url[5:].partition(",")
    if not comma:
        raise ValueError("the data: URL has no comma before its data")
    if any(p.strip().lower() == "base64" for p in header.split(";")[1:]):
        try:
            return base64.b64decode("".join(payload.split()), validate=True)
        except (binascii.Error, ValueError):
            raise ValueError("the data: URL is not valid base64") from None
    return urllib.parse.unquote_to_bytes(payload)


def _describe_image(number: int, url: str) -> str:
    label = f"Image {number}"
    scheme = url[:8].lower()
    if scheme.startswith(("http://", "https://")):
        return (f"{label} is a web address ({url[:80]}); I can't fetch remote images in the "
                "sandbox, so send the picture itself as a data: URL "
                "(gpucloud_nb.media.image_data_url makes one).")
    if not scheme.startswith("data:"):
        return f"{label} has no data: URL I can read."
    try:
        data = _decode_data_url(url)
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data))
        with image:
            fmt, (width, height) = image.format or "unknown", image.size
            frames = getattr(image, "n_frames", 1)
            if width * height > _MAX_ANALYSED_PIXELS:
                return (f"{label} is a {fmt} image of {width}×{height} pixels, too large for me "
                        "to measure its colours.")
            if fmt == "JPEG":
                image.draft("RGB", (256, 256))  # decode at reduced scale: same colours, faster
            image.load()
            colours = dominant_colours(ImageOps.exif_transpose(image))
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        return f"{label} has more pixels than I am willing to decode."
    except ValueError as error:  # from _decode_data_url: fixed wording
        return f"{label} could not be read: {error}."
    except Image.UnidentifiedImageError:
        return f"{label} is not in an image format Pillow can read."
    except Exception as error:  # the type only: messages may hold object addresses
        return f"{label} could not be decoded by Pillow ({type(error).__name__})."
    described = ", ".join(f"{name} ({code}, {share:.0%})" for name, code, share in colours)
    animation = f", animated with {frames} frames" if frames > 1 else ""
    return (f"{label} is a {fmt} image of {width}×{height} pixels ({len(data):,} bytes"
            f"{animation}); its dominant colours are {described or 'too mixed to name'}.")


# --------------------------------------------------------------------------------------------
# The reply


def describe(messages: Sequence[Mapping[str, Any]]) -> str:
    """Reply to OpenAI-style chat ``messages`` with what can be measured in them.

    The reply quotes the last user prompt and counts its words, works out simple arithmetic in it
    ("what is 12*7"), says how many messages the conversation holds (so a client can see that the
    history arrived), and describes each image of the last user message: format, pixel size and
    dominant colours. Web-address images are not fetched. The same messages always give the same
    reply.

        >>> describe([{"role": "user", "content": [  # doctest: +SKIP
        ...     {"type": "text", "text": "What colour is this?"},
        ...     {"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}}]}])
        'You asked: “What colour is this?” (4 words). ... Image 1 is a PNG image of 64×48 ...'
    """
    roles = [str(m.get("role", "")) for m in messages if isinstance(m, Mapping)]
    last_user = next((m for m in reversed(messages)
                      if isinstance(m, Mapping) and m.get("role") == "user"), None)
    sentences: list[str] = []
    if last_user is None:
        sentences.append("There is no user message for me to answer yet.")
        texts: list[str] = []
        images: list[Any] = []
    else:
        texts, images = _parts(last_user.get("content"))
        prompt = "\n".join(t for t in texts if t.strip())
        if prompt:
            words = len(_WORD.findall(prompt))
            sentences.append(f"You asked: {_quote(prompt)} ({_plural(words, 'word')}, "
                             f"{_plural(len(prompt), 'character')}).")
            answer = _arithmetic(prompt)
            if answer:
                sentences.append(answer)
        elif images:
            sentences.append(f"You sent {_plural(len(images), 'image')} and no text.")
        else:
            sentences.append("Your last message is empty.")
    user_count = roles.count("user")
    assistant_count = roles.count("assistant")
    other = len(roles) - user_count - assistant_count
    history = (f"This conversation has {_plural(len(roles), 'message')}: "
               f"{user_count} from you and {assistant_count} from the assistant")
    if other:
        history += f", plus {_plural(other, 'other')} (system or tool)"
    sentences.append(history + ".")
    earlier = sum(len(_parts(m.get("content"))[1]) for m in messages
                  if isinstance(m, Mapping) and m is not last_user and m.get("role") == "user")
    if earlier:
        sentences.append(f"Earlier messages carried {_plural(earlier, 'image')}, which I leave "
                         "aside to look at the newest.")
    for number, url in enumerate(images, start=1):
        sentences.append(_describe_image(number, url))
    sentences.append(f"I am {MODEL_ID}, the sandbox's built-in model: I measure and count "
                     "rather than understand, so the same question always gets the same answer.")
    return " ".join(sentences)
