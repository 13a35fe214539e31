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
from typing import Any

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


def _image_as_link(self, tokens: Sequence[Token], idx: int, options: Any, env: Any) -> str:
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


# A gap between two words where a paragraph may be cut; ``end`` is set at a sentence's end.
_GAP = re.compile(r"(?P<end>[.!?:;][\"')\]]*)?(?P<gap>[ \t\n]+)(?=[^\W\d_])")
# What may open an inline span that a cut would break: code, emphasis, strike, link, parenthesis.
_MARK = re.compile(r"~~|[`*\[\]()]")


class _Spans:
    """Running counts of the inline marks seen so far in a paragraph, updated in one pass.

    A closing ``]`` or ``)`` with nothing open is ignored (it cannot be part of a span), so a
    stray one does not block every later cut; a stray opener does until the paragraph is cut
    by force (see :meth:`MarkdownStream._cut_paragraph`).
    """

    __slots__ = ("brackets", "parens", "stars", "ticks", "tildes")

    def __init__(self) -> None:
        self.ticks = self.stars = self.tildes = self.brackets = self.parens = 0

    def scan(self, text: str, start: int, end: int) -> None:
        for match in _MARK.finditer(text, start, end):
            mark = match.group()
            if mark == "`":
                self.ticks ^= 1
            elif mark == "*":
                self.stars ^= 1
            elif mark == "~~":
                self.tildes ^= 1
            elif mark == "[":
                self.brackets += 1
            elif mark == "(":
                self.parens += 1
            elif mark == "]":
                self.brackets = max(0, self.brackets - 1)
            else:
                self.parens = max(0, self.parens - 1)

    @property
    def closed(self) -> bool:
        return not (self.ticks or self.stars or self.tildes or self.brackets or self.parens)


@dataclass
class MarkdownStream:
    """A reply being streamed, rendered as frozen segments plus one open tail.

    ``append(delta)`` adds text. ``settle()`` returns the raw Markdown of a piece that can be
    frozen now (``""`` when none) and moves past it: call it until it returns ``""``; the open
    ``tail`` is then at most ``min_chars + max_chars`` characters, however long the reply, so
    showing it costs the same at the first kilobyte and at the last megabyte. Rendering the
    frozen pieces one by one gives the same HTML as rendering the whole text, because a piece
    always ends where a new top-level block starts and Markdown blocks do not reach back, with
    two documented exceptions:

    - a link reference definition (``[x]: http://...``) only applies inside its own piece;
    - a single block longer than ``max_chars`` is cut so that the tail stays small, and shows
      as two consecutive blocks: a paragraph at a sentence end (or a word gap) where no inline
      span is open, a list between items, a code block between lines (the fence is closed and
      reopened). When no such place exists (a stray ``*`` or ``[`` early in a paragraph, one
      10,000-character word or code line, a long table, quote or heading), the cut is forced:
      at the last sentence end or word gap, else at the last line break, else inside the line
      (a code line stays in its code block). A span cut this way shows its marks as text; no
      text is lost, and each piece is rendered and sanitised on its own.

    Each call to ``settle()`` parses at most a few ``max_chars`` of text and every scan is
    linear, so the whole reply costs time in proportion to its length. A piece is frozen only
    once it holds at least ``min_chars`` characters, so short blocks (headings, one-line
    paragraphs) share a widget.

        >>> stream = MarkdownStream(min_chars=10, max_chars=40)
        >>> stream.append("# Title\\n\\nSome text.\\n\\nMore")
        >>> stream.settle(), stream.tail
        ('# Title\\n\\nSome text.\\n\\n', 'More')
    """

    min_chars: int = 400
    max_chars: int = 1600
    _open: str = field(default="", init=False, repr=False)       # the text after the frozen pieces
    _carry: str = field(default="", init=False, repr=False)      # a code fence reopened in front of it
    _pending: list[str] = field(default_factory=list, init=False, repr=False)   # appended, not yet joined
    _pending_chars: int = field(default=0, init=False, repr=False)
    _passed: list[str] = field(default_factory=list, init=False, repr=False)    # text of the frozen pieces
    _cr: bool = field(default=False, init=False, repr=False)

    def __post_init__(self) -> None:
        self.max_chars = max(self.max_chars, self.min_chars, 2)

    def append(self, delta: str) -> None:
        """Add streamed text (``\\r\\n`` and ``\\r`` become ``\\n``, as Markdown reads them)."""
        if self._cr:
            delta = "\r" + delta
            self._cr = False
        if delta.endswith("\r"):
            delta, self._cr = delta[:-1], True
        if delta:
            delta = _normalize(delta)
            self._pending.append(delta)  # joined once, when looked at: appending stays O(1)
            self._pending_chars += len(delta)

    def finish(self) -> None:
        """No more text will come."""
        if self._cr:
            self.append("\n")
            self._cr = False

    def _join(self) -> None:
        if self._pending:
            self._open += "".join(self._pending)
            self._pending.clear()
            self._pending_chars = 0

    @property
    def text(self) -> str:
        """Everything appended so far (normalised)."""
        self._join()
        if len(self._passed) > 1:
            self._passed[:] = ["".join(self._passed)]
        return "".join((*self._passed, self._open))

    @property
    def tail(self) -> str:
        """The open tail's Markdown (what the streaming widget shows)."""
        self._join()
        return self._carry + self._open

    @property
    def tail_chars(self) -> int:
        """``len(tail)``, without joining what was appended."""
        return len(self._carry) + len(self._open) + self._pending_chars

    def settle(self) -> str:
        """Freeze a piece that can no longer change; return its Markdown (``""``: none yet)."""
        source = self.tail
        if len(source) < self.min_chars:
            return ""
        window = len(self._carry) + 4 * self.max_chars + self.min_chars
        if len(source) > window:
            source = source[:window]  # as if only this much had arrived: bounded parse work
        tokens = _MD.parse(source)
        blocks = _top_blocks(tokens)
        if not blocks:  # blank lines only
            return self._force_cut(source, 0) if len(source) > self.max_chars else ""
        lines = _line_offsets(source)
        cut = lines[blocks[-1][1].map[0]] if len(blocks) >= 2 else 0  # type: ignore[index]
        if cut >= self.min_chars:
            return self._advance(source, cut)
        if len(source) - cut <= self.max_chars:
            return ""
        index, last = blocks[-1]
        begin = lines[last.map[0]]  # type: ignore[index]
        frozen = ""
        if last.type == "paragraph_open":
            frozen = self._cut_paragraph(source, begin)
        elif last.type in ("bullet_list_open", "ordered_list_open"):
            items = [t for t in tokens[index:] if t.type == "list_item_open" and t.level == 1 and t.map]
            if len(items) >= 2:
                at = lines[items[-1].map[0]]  # type: ignore[index]
                if at - begin >= self.min_chars // 2 or cut:
                    frozen = self._advance(source, at)
        elif last.type == "fence" and last.markup:
            frozen = self._cut_fence(source, begin)
        return frozen or self._force_cut(source, begin)

    def _advance(self, source: str, cut: int, carry: str = "", closing: str = "") -> str:
        self._join()
        taken = len(self._carry)
        self._passed.append(self._open[:cut - taken])
        self._open = self._open[cut - taken:]
        self._carry = carry
        return source[:cut] + closing

    def _hard_cut(self, source: str, begin: int) -> int:
        """Where to cut inside a line: keep ``min_chars // 2`` open, before a letter if near."""
        at = len(source) - self.min_chars // 2
        for back in range(at, max(begin + 1, at - 32), -1):
            if source[back].isalnum():
                return back
        return at

    def _cut_paragraph(self, source: str, begin: int) -> str:
        """Cut the paragraph starting at ``begin`` at the best place, in one pass over it."""
        floor = begin + self.min_chars // 2
        spans = _Spans()
        scanned = begin
        best: dict[tuple[bool, bool], tuple[int, int]] = {}  # (closed, sentence) -> (kept, after)
        for match in _GAP.finditer(source, begin, len(source) - 1):
            kept = match.start("gap")
            spans.scan(source, scanned, kept)
            scanned = kept
            if kept >= floor:
                best[(spans.closed, match.group("end") is not None)] = (kept, match.end())
        for key in ((True, True), (True, False), (False, True), (False, False)):
            if key in best and len(source) - best[key][1] <= self.max_chars:
                kept, after = best[key]
                self._advance(source, after)
                return source[:kept] + "\n"
        return ""

    def _cut_fence(self, source: str, begin: int) -> str:
        opener_end = source.find("\n", begin)
        if opener_end == -1:
            return ""
        opener = source[begin:opener_end + 1]
        stripped = opener.lstrip(" ")
        run = len(stripped) - len(stripped.lstrip(stripped[0]))
        indent = " " * (len(opener) - len(stripped))
        fence = indent + stripped[0] * run + "\n"  # the info string does not change the HTML
        if len(fence) > self.min_chars // 4:
            return ""
        last_line = source.rfind("\n", opener_end + 1, len(source) - 1)
        if last_line != -1 and last_line + 1 - begin >= self.min_chars // 2 \
                and len(source) - last_line - 1 <= self.max_chars:
            return self._advance(source, last_line + 1, carry=fence, closing=fence)
        at = self._hard_cut(source, opener_end + 1)  # one huge line: cut it, inside the block
        if at - begin < self.min_chars // 2:
            return ""
        return self._advance(source, at, carry=fence, closing="\n" + fence)

    def _force_cut(self, source: str, begin: int) -> str:
        """No clean place: cut at the last line break, else inside the line."""
        line = source.rfind("\n", begin + self.min_chars // 2, len(source) - 1)
        if line != -1 and len(source) - line - 1 <= self.max_chars:
            return self._advance(source, line + 1)
        return self._advance(source, self._hard_cut(source, begin))
