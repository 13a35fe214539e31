"""Safe rendering of untrusted text (model replies, pasted prompts) as Markdown for HTML widgets.

Model output is text from outside: it is parsed as Markdown with raw HTML disabled
(``MarkdownIt("js-default")``: an HTML tag in the text is shown as text), and the resulting HTML
is then passed through the ``nh3`` allow-list sanitiser before it reaches any widget. Either step
alone would block ``<script>``; both are kept so that a bug in one is not a hole.

    >>> render_markdown("**Hi** <script>alert(1)</script> [x](javascript:alert(1))")
    '<p><strong>Hi</strong> &lt;script&gt;alert(1)&lt;/script&gt; [x](javascript:alert(1))</p>\\n'

Allowed: ``p pre code em strong ul ol li a blockquote h1-h6 table thead tbody tr th td br hr``.
Attributes kept: ``a[href]`` when it is an absolute ``http``, ``https`` or ``mailto`` URL (relative
URLs are dropped), with ``rel="noopener noreferrer nofollow"`` and ``target="_blank"`` added;
``ol[start]`` (numbering); ``th/td[style]`` only for ``text-align:left|center|right``. Everything
else (images, classes, ids, event handlers, styles) is removed. Markdown images are rendered as a
link to the image instead of an ``<img>``, so nothing loads from a URL a model chose.

:class:`MarkdownStream` renders a reply that is still arriving in *segments*: top-level blocks
that can no longer change are rendered once and handed out ("frozen"); only the open tail is
rendered again as text arrives. See its docstring for the exact rules.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import nh3
from markdown_it import MarkdownIt
from markdown_it.token import Token

__all__ = [
    "ALLOWED_ATTRIBUTES",
    "ALLOWED_TAGS",
    "LINK_REL",
    "MarkdownStream",
    "render_markdown",
    "sanitize_html",
]

ALLOWED_TAGS = frozenset({
    "p", "pre", "code", "em", "strong", "ul", "ol", "li", "a", "blockquote",
    "h1", "h2", "h3", "h4", "h5", "h6",
    "table", "thead", "tbody", "tr", "th", "td",
    "br", "hr",
})
ALLOWED_ATTRIBUTES: dict[str, set[str]] = {"*": set(), "a": {"href"}, "ol": {"start"}}
LINK_REL = "noopener noreferrer nofollow"
_SCHEMES = {"http", "https", "mailto"}
_ALIGN = {"style": {"text-align:left", "text-align:center", "text-align:right"}}
_SAFE_HREF = re.compile(r"^(?:https?://|mailto:)", re.IGNORECASE)


def _attribute_filter(tag: str, attribute: str, value: str) -> str | None:
    if tag == "a" and attribute == "href":
        return value if _SAFE_HREF.match(value.strip()) else None
    if tag == "ol" and attribute == "start":
        return value if value.isdigit() and len(value) <= 9 else None
    return value


_CLEANER = nh3.Cleaner(
    tags=set(ALLOWED_TAGS),
    clean_content_tags={"script", "style"},
    attributes={key: set(value) for key, value in ALLOWED_ATTRIBUTES.items()},
    attribute_filter=_attribute_filter,
    link_rel=LINK_REL,
    url_schemes=set(_SCHEMES),
    url_relative="deny",
    tag_attribute_values={"th": _ALIGN, "td": _ALIGN},
    set_tag_attribute_values={"a": {"target": "_blank"}},
    strip_comments=True,
)


def _image_as_link(self, tokens: Sequence[Token], idx: int, options, env) -> str:  # type: ignore[no-untyped-def]
    """``![alt](url)`` → a link to the image, so no image loads by itself."""
    token = tokens[idx]
    alt = self.renderInlineAsText(token.children or [], options, env) or "image"
    src = token.attrGet("src") or ""
    return f'<a href="{html.escape(str(src), quote=True)}">[image: {html.escape(alt)}]</a>'


def _new_parser() -> MarkdownIt:
    parser = MarkdownIt("js-default")  # html=False: raw HTML in the text is shown as text
    parser.add_render_rule("image", _image_as_link)
    return parser


_MD = _new_parser()


def sanitize_html(fragment: str) -> str:
    """Pass an HTML fragment through the allow-list above (nh3)."""
    return _CLEANER.clean(fragment)


def render_markdown(text: str) -> str:
    """Untrusted ``text`` → Markdown (raw HTML off) → sanitised HTML, safe for an HTML widget."""
    if not text:
        return ""
    return sanitize_html(_MD.render(text))


# --------------------------------------------------------------------------------------------
# Streaming


def _normalize(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "\ufffd")


def _line_offsets(text: str) -> list[int]:
    offsets = [0]
    position = text.find("\n")
    while position != -1:
        offsets.append(position + 1)
        position = text.find("\n", position + 1)
    return offsets


def _top_blocks(tokens: Sequence[Token]) -> list[tuple[int, Token]]:
    """(index, token) of each top-level block: openers and leaf blocks at level 0."""
    return [(i, t) for i, t in enumerate(tokens) if t.level == 0 and t.nesting >= 0 and t.map]


_SENTENCE_END = re.compile(r"[.!?:;][\"')\]]*[ \t\n]+(?=[^\W\d_])")
_WORD_GAP = re.compile(r"[ \t\n]+(?=[^\W\d_])")


def _balanced(piece: str) -> bool:
    """Whether cutting a paragraph after ``piece`` leaves no inline construct open."""
    return (piece.count("`") % 2 == 0 and piece.count("*") % 2 == 0
            and piece.count("[") == piece.count("]") and piece.count("(") == piece.count(")")
            and piece.count("~~") % 2 == 0)


@dataclass
class MarkdownStream:
    """A reply being streamed, rendered as frozen segments plus one open tail.

    ``append(delta)`` adds text. ``settle()`` returns the raw Markdown of the text that can be
    frozen now (``""`` when none) and moves past it; ``tail`` is what is still open. Rendering
    ``frozen`` segments one by one gives the same HTML as rendering the whole text, because a
    segment always ends where a new top-level block starts and Markdown blocks do not reach
    back, with two documented exceptions:

    - a link reference definition (``[x]: http://...``) only applies inside its own segment;
    - a single block longer than ``max_chars`` (a very long paragraph, list or fenced code
      block) is cut so the tail stays small: a paragraph at a sentence end (or a word gap)
      where no inline span is open, a list between items, a code block between lines (the
      fence is closed and reopened). Such a block shows as two consecutive blocks.

    A segment is frozen only once it holds at least ``min_chars`` characters, so short blocks
    (headings, one-line paragraphs) share a widget.
    """

    min_chars: int = 400
    max_chars: int = 1600
    text: str = ""
    _start: int = 0          # where the open tail begins in ``text``
    _carry: str = ""         # a code fence reopened in front of the tail after a cut
    _cr: bool = field(default=False, repr=False)

    def append(self, delta: str) -> None:
        """Add streamed text (``\\r\\n`` and ``\\r`` become ``\\n``, as Markdown reads them)."""
        if self._cr:
            delta = "\r" + delta
            self._cr = False
        if delta.endswith("\r"):
            delta, self._cr = delta[:-1], True
        self.text += _normalize(delta)

    def finish(self) -> None:
        """No more text will come."""
        if self._cr:
            self.text += "\n"
            self._cr = False

    @property
    def tail(self) -> str:
        """The open tail's Markdown (what the streaming widget shows)."""
        return self._carry + self.text[self._start:]

    def settle(self) -> str:
        """Freeze what can no longer change; return its Markdown (``""``: nothing yet)."""
        source = self.tail
        if len(source) < self.min_chars:
            return ""
        tokens = _MD.parse(source)
        blocks = _top_blocks(tokens)
        lines = _line_offsets(source)
        cut = 0
        if len(blocks) >= 2:
            cut = lines[blocks[-1][1].map[0]]  # type: ignore[index]
        if cut >= self.min_chars:
            return self._advance(source, cut)
        if len(source) - cut <= self.max_chars or not blocks:
            return ""
        index, last = blocks[-1]
        begin = lines[last.map[0]]  # type: ignore[index]
        if last.type == "paragraph_open":
            return self._cut_paragraph(source, begin)
        if last.type in ("bullet_list_open", "ordered_list_open"):
            items = [t for t in tokens[index:] if t.type == "list_item_open" and t.level == 1 and t.map]
            if len(items) >= 2:
                at = lines[items[-1].map[0]]  # type: ignore[index]
                if at - begin >= self.min_chars // 2 or cut:
                    return self._advance(source, at)
            return ""
        if last.type == "fence" and last.markup:
            return self._cut_fence(source, begin)
        return ""

    def _advance(self, source: str, cut: int, carry: str = "", closing: str = "") -> str:
        taken = len(self._carry)
        frozen = source[:cut] + closing
        self._start += cut - taken
        self._carry = carry
        return frozen

    def _cut_paragraph(self, source: str, begin: int) -> str:
        body = source[begin:]
        for pattern in (_SENTENCE_END, _WORD_GAP):
            best = None
            for match in pattern.finditer(body, 0, len(body) - 1):
                kept = body[:match.end()].rstrip()
                if len(kept) >= self.min_chars // 2 and _balanced(kept):
                    best = match
            if best is not None:
                frozen = source[:begin] + body[:best.end()].rstrip() + "\n"
                self._start += begin + best.end() - len(self._carry)
                self._carry = ""
                return frozen
        return ""

    def _cut_fence(self, source: str, begin: int) -> str:
        opener_end = source.find("\n", begin)
        if opener_end == -1:
            return ""
        opener = source[begin:opener_end + 1]
        fence = opener.strip()[0] * 3
        stripped = opener.lstrip(" ")
        run = len(stripped) - len(stripped.lstrip(fence[0]))
        closing = " " * (len(opener) - len(stripped)) + fence[0] * run + "\n"
        last_line = source.rfind("\n", opener_end + 1, len(source) - 1)
        if last_line == -1 or last_line + 1 - begin < self.min_chars // 2:
            return ""
        return self._advance(source, last_line + 1, carry=opener, closing=closing)
