"""Safe rendering of untrusted text (gpucloud_nb.widgets._markdown) and the streaming throttle."""

from __future__ import annotations

import asyncio
import itertools
import re

import pytest

from gpucloud_nb.widgets._markdown import MarkdownStream, render_markdown, sanitize_html
from gpucloud_nb.widgets._throttle import Throttle

ATTACKS = [
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    "[click me](javascript:alert(1))",
    "[click me](JaVaScRiPt:alert(1))",
    "[tab](java\tscript:alert(1))",
    "[entity](javascript&#58;alert(1))",
    "<javascript:alert(1)>",
    "[data](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)",
    "[vb](vbscript:msgbox(1))",
    "![pixel](javascript:alert(1))",
    '<a href="javascript:alert(1)">raw link</a>',
    "<iframe src=https://evil.example></iframe>",
    "<svg onload=alert(1)>",
    "<style>body{display:none}</style>",
    "[relative](/api/kernels)",
    '[title](https://example.com "x\\" onmouseover=\\"alert(1)")',
]


def assert_inert(rendered: str) -> None:
    lowered = rendered.lower()
    assert "<script" not in lowered
    assert "<img" not in lowered and "<iframe" not in lowered and "<svg" not in lowered
    assert "<style" not in lowered
    assert not re.search(r"<[^>]*\son\w+\s*=", lowered), rendered  # no event handler attribute
    for href in re.findall(r'<a\s[^>]*href="([^"]*)"', rendered):
        assert href.lower().startswith(("http://", "https://", "mailto:")), href


@pytest.mark.parametrize("attack", ATTACKS)
def test_attacks_render_inert(attack: str) -> None:
    assert_inert(render_markdown(attack))
    assert_inert(render_markdown(f"Some text\n\n{attack}\n\n- item {attack}\n\n> {attack}"))


def test_script_is_shown_as_text() -> None:
    html = render_markdown("Hi <script>alert(1)</script> and <img src=x onerror=alert(1)>")
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html


def test_javascript_link_is_not_a_link() -> None:
    html = render_markdown("[click me](javascript:alert(1))")
    assert "<a" not in html
    assert "click me" in html


def test_title_and_other_attributes_are_dropped() -> None:
    html = render_markdown('[t](https://example.com "a title")')
    assert "title=" not in html and "a title" not in html
    assert "lang=" not in sanitize_html('<p lang="en" title="t">x</p>')


def test_safe_links_get_rel_and_target() -> None:
    html = render_markdown("[docs](https://example.com/a?b=1) and [mail](mailto:me@example.com)")
    assert html.count("<a ") == 2
    assert 'href="https://example.com/a?b=1"' in html
    assert 'href="mailto:me@example.com"' in html
    assert html.count('rel="noopener noreferrer nofollow"') == 2
    assert 'target="_blank"' in html


def test_relative_link_loses_its_href() -> None:
    html = render_markdown("[relative](/api/kernels)")
    assert "href" not in html
    assert "relative" in html


def test_image_becomes_a_link_not_an_img() -> None:
    html = render_markdown("![a cat](https://example.com/cat.png)")
    assert "<img" not in html
    assert 'href="https://example.com/cat.png"' in html
    assert "[image: a cat]" in html


def test_code_block_keeps_formatting() -> None:
    code = "def f(x):\n    if x:\n        return  x * 2\n\n    return 0\n"
    html = render_markdown(f"```python\n{code}```")
    assert html.startswith("<pre><code>")
    assert "    if x:\n        return  x * 2\n\n    return 0" in html
    assert "class=" not in html  # classes are dropped by the allow-list


def test_allowed_structure_survives() -> None:
    text = ("# Title\n\n## Sub\n\n*em* **strong** `code`\n\n- a\n- b\n\n3. three\n4. four\n\n"
            "> quoted\n\n---\n\n| a | b |\n|--:|:-:|\n| 1 | 2 |\n\nline  \nbreak")
    html = render_markdown(text)
    for tag in ("<h1>", "<h2>", "<em>", "<strong>", "<code>", "<ul>", "<li>", '<ol start="3">',
                "<blockquote>", "<hr>", "<table>", "<thead>", "<tbody>", "<tr>", "<br>"):
        assert tag in html, tag
    assert '<th style="text-align:right">' in html
    assert '<td style="text-align:center">' in html


def test_sanitizer_alone_applies_the_allow_list() -> None:
    dirty = ('<div onclick="x"><a href="javascript:alert(1)" onclick="y">a</a>'
             '<a href="https://ok.example" class="c" id="i">b</a><script>bad()</script>'
             '<p style="color:red">p</p><span>s</span><td style="position:fixed">t</td></div>')
    clean = sanitize_html(dirty)
    assert_inert(clean)
    assert "bad()" not in clean  # script content removed entirely
    assert "<div" not in clean and "<span" not in clean and "style=" not in clean
    assert 'id="i"' not in clean and 'class="c"' not in clean
    link = re.search(r'<a ([^>]*)>b</a>', clean)
    assert link is not None
    assert sorted(re.findall(r'\w+="[^"]*"', link.group(1))) == [
        'href="https://ok.example"', 'rel="noopener noreferrer nofollow"', 'target="_blank"']
    assert "<a target" in clean  # the javascript: link lost its href


def test_empty_text_renders_nothing() -> None:
    assert render_markdown("") == ""


# -- streaming segments ----------------------------------------------------------------------


def stream_segments(text: str, step: int = 7, **sizes: int) -> list[str]:
    stream = MarkdownStream(**sizes)
    segments = []
    for i in range(0, len(text), step):
        stream.append(text[i:i + step])
        frozen = stream.settle()
        if frozen:
            segments.append(frozen)
    stream.finish()
    segments.append(stream.tail)
    return segments


DOC = "\n\n".join([
    "# A heading",
    "First paragraph with *emphasis* and `code` spanning a few words. " * 4,
    "- one\n- two\n\n- three after a blank line",
    "```python\n" + "\n".join(f"x{i} = {i}  # keep   spacing" for i in range(12)) + "\n```",
    "1. first\n2. second",
    "> a quote\nwith a lazy line",
    "| a | b |\n|---|---|\n| 1 | 2 |",
    "Last paragraph. " * 10,
])


def test_segments_render_like_the_whole_text() -> None:
    segments = stream_segments(DOC, min_chars=20, max_chars=100_000)
    assert len(segments) > 5
    assert "".join(render_markdown(s) for s in segments) == render_markdown(DOC)


def test_long_paragraph_is_cut_at_a_sentence_end_and_loses_no_text() -> None:
    text = " ".join(f"Sentence number {i} has *some* words in it." for i in range(200))
    segments = stream_segments(text, min_chars=200, max_chars=600)
    assert len(segments) > 5
    assert all(len(s) < 900 for s in segments)
    words = re.findall(r"\S+", text)
    assert re.findall(r"\S+", " ".join(segments)) == words
    for segment in segments[:-1]:
        assert segment.rstrip().endswith(".")
        assert segment.count("*") % 2 == 0


def test_long_code_block_is_cut_between_lines_and_reopened() -> None:
    lines = [f"    value_{i} = compute({i})   # spaced" for i in range(200)]
    text = "```python\n" + "\n".join(lines) + "\n```\n\nAfter."
    segments = stream_segments(text, min_chars=200, max_chars=800)
    assert len(segments) > 3
    rendered = [render_markdown(s) for s in segments]
    shown = "".join(re.sub(r"</?(pre|code|p)>", "", r) for r in rendered)
    for line in lines:
        assert line in shown
    for r in rendered[:-1]:
        assert r.startswith("<pre><code>") and r.rstrip().endswith("</code></pre>")


def test_long_list_is_cut_between_items_keeping_numbering() -> None:
    text = "\n".join(f"{i}. item number {i} with several words in it" for i in range(1, 120))
    segments = stream_segments(text, min_chars=200, max_chars=800)
    assert len(segments) > 3
    rendered = "".join(render_markdown(s) for s in segments)
    assert re.search(r'<ol start="\d+">', rendered)
    assert rendered.count("<li>") == 119


def test_carriage_returns_are_normalised_across_chunks() -> None:
    stream = MarkdownStream()
    for piece in ("line one\r", "\nline two\r", "\r", "\nend"):
        stream.append(piece)
    stream.finish()
    assert stream.text == "line one\nline two\n\nend"


# -- throttle -------------------------------------------------------------------------------


def test_throttle_runs_at_most_once_per_interval_and_flushes_the_rest() -> None:
    runs: list[float] = []

    async def main() -> Throttle:
        loop = asyncio.get_running_loop()
        throttle = Throttle(0.05, lambda: runs.append(loop.time()))
        end = loop.time() + 0.5
        while loop.time() < end:
            throttle.poke()
            await asyncio.sleep(0.001)
        throttle.flush()
        return throttle

    throttle = asyncio.run(main())
    assert 5 <= len(runs) <= 13
    gaps = [b - a for a, b in itertools.pairwise(runs)][:-1]  # the final flush is free
    assert min(gaps) >= 0.045
    assert not throttle.pending


def test_throttle_stretches_the_interval_with_the_cost() -> None:
    runs: list[float] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        throttle = Throttle(0.01, lambda: runs.append(loop.time()), cost=lambda: 1000,
                            bytes_per_second=10_000, max_interval=0.5)
        assert throttle.current_interval() == pytest.approx(0.1)
        end = loop.time() + 0.45
        while loop.time() < end:
            throttle.poke()
            await asyncio.sleep(0.002)
        throttle.cancel()

    asyncio.run(main())
    assert 3 <= len(runs) <= 6


def test_throttle_delayed_run_happens_without_another_poke() -> None:
    runs: list[float] = []

    async def main() -> None:
        throttle = Throttle(0.05, lambda: runs.append(1))
        throttle.poke()          # runs at once
        throttle.poke()          # scheduled for the end of the interval
        assert len(runs) == 1 and throttle.pending
        await asyncio.sleep(0.1)
        assert len(runs) == 2 and not throttle.pending

    asyncio.run(main())


# -- bounded work: stray marks, forced cuts, huge replies -------------------------------------


def feed(stream: MarkdownStream, text: str, step: int) -> tuple[list[str], int]:
    """Stream ``text`` in ``step``-sized pieces, settling after each; (segments, longest tail)."""
    segments: list[str] = []
    longest = 0
    for i in range(0, len(text), step):
        stream.append(text[i:i + step])
        while frozen := stream.settle():
            segments.append(frozen)
        longest = max(longest, len(stream.tail))
    stream.finish()
    segments.append(stream.tail)
    return segments, longest


SENTENCES = " ".join(f"Sentence number {i} has some words in it." for i in range(300))


@pytest.mark.parametrize("stray", ["*", "[", ")", "`", "~~", "(", "]"])
def test_a_stray_mark_early_in_a_paragraph_does_not_stop_the_cuts(stray: str) -> None:
    text = f"Look {stray} here. {SENTENCES}"
    segments, longest = feed(MarkdownStream(min_chars=200, max_chars=600), text, 7)
    assert longest <= 200 + 600 + 7  # the open tail stays capped
    assert len(segments) > 10
    assert re.findall(r"\S+", " ".join(segments)) == re.findall(r"\S+", text)  # no text lost
    for segment in segments[1:-1]:  # after the stray mark's segment: sentence ends again
        assert segment.rstrip().endswith(".")


@pytest.mark.parametrize("case", ["no gaps", "code line", "table", "heading", "quote", "blank",
                                  "one item"])
def test_every_kind_of_long_block_is_cut_at_max_chars(case: str) -> None:
    text = {
        "no gaps": "x" * 20_000,
        "code line": "```python\n" + "y = 1;" * 4_000 + "\n```\n\nAfter.",
        "table": "| a | b |\n|---|---|\n" + "".join(f"| {i} | {i * i} |\n" for i in range(2_000)),
        "heading": "# " + "word " * 4_000,
        "quote": "".join(f"> line {i} of a long quote\n" for i in range(1_000)),
        "blank": "Start.\n" + "\n" * 20_000 + "End.",
        "one item": "- " + "item text " * 2_000,
    }[case]
    segments, longest = feed(MarkdownStream(min_chars=200, max_chars=600), text, 50)
    assert longest <= 200 + 600 + 50
    assert re.sub(r"\s", "", "".join(segments)).replace("```python", "").replace("```", "") == \
        re.sub(r"\s", "", text).replace("```python", "").replace("```", "")
    for segment in segments:
        assert_inert(render_markdown(segment))


def test_a_forced_cut_keeps_a_code_line_inside_its_code_block() -> None:
    text = "```python\n" + "z = 2;" * 1_000 + "\n```"
    segments, _ = feed(MarkdownStream(min_chars=200, max_chars=600), text, 13)
    assert len(segments) > 3
    for segment in segments:
        assert render_markdown(segment).startswith("<pre><code>")


def test_attacks_stay_inert_across_forced_cuts() -> None:
    attacks = " ".join(ATTACKS)
    text = f"Stray * mark. {attacks} " * 12 + "`" + "<script>alert(1)</script>" * 100
    segments, _ = feed(MarkdownStream(min_chars=200, max_chars=600), text, 29)
    for segment in segments:
        assert_inert(render_markdown(segment))


def test_a_huge_reply_is_parsed_and_rendered_in_linear_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """1.6 MB in one paragraph with a stray ``*``: every character is parsed a few times, not
    once per flush (the work a flush does stays bounded whatever the reply's length)."""
    from gpucloud_nb.widgets import _markdown

    work: list[int] = []
    parse = _markdown._MD.parse

    def counting_parse(source: str, env: object = None) -> object:
        work.append(len(source))
        return parse(source, env)

    monkeypatch.setattr(_markdown._MD, "parse", counting_parse)
    text = "A stray * star. " + SENTENCES * 140
    assert len(text) > 1_600_000
    stream = MarkdownStream(min_chars=600, max_chars=1200)
    for i in range(0, len(text), 16_000):
        stream.append(text[i:i + 16_000])
        while frozen := stream.settle():
            render_markdown(frozen)
        assert len(stream.tail) <= 600 + 1200
        render_markdown(stream.tail)  # what a flush shows
    stream.finish()
    assert stream.text == text
    assert sum(work) <= 4 * len(text)
