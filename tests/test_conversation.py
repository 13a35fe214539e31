"""conversation.py: a chat's history, the messages a request sends and its Markdown, no widgets."""

from __future__ import annotations

import io

import pytest
from PIL import Image

from gpucloud_nb import InvalidInputError
from gpucloud_nb.conversation import Conversation, make_attachment


def png(width: int = 4, height: int = 3) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), "red").save(buffer, "PNG")
    return buffer.getvalue()


def test_a_turn_with_an_image_is_sent_as_parts_and_exported_with_its_note() -> None:
    talk = Conversation()
    picture = make_attachment(png())
    assert picture.note == "4×3 PNG" and picture.url.startswith("data:image/png;base64,")
    talk.add_user("What is this?", [picture])
    talk.add_reply("A red square.", stopped=False, incomplete=False)
    assert talk.request_messages("Be brief.") == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "What is this?"},
                                     {"type": "image_url", "image_url": {"url": picture.url}}]},
        {"role": "assistant", "content": "A red square."},
    ]
    assert talk.to_markdown("Be brief.") == (
        "## System\n\nBe brief.\n\n## User\n\nWhat is this?\n[image: 4×3 PNG]\n\n"
        "## Assistant\n\nA red square.\n")


def test_replies_cut_short_are_marked() -> None:
    talk = Conversation()
    talk.add_user("one")
    talk.add_reply("partial", stopped=True, incomplete=False)
    talk.add_user("two")
    talk.add_reply("cut", stopped=False, incomplete=True)
    text = talk.to_markdown("")
    assert "partial\n[stopped]" in text and "cut\n[incomplete]" in text
    assert not text.startswith("## System")


def test_forget_removes_that_message_only_and_history_is_a_copy() -> None:
    talk = Conversation()
    first = talk.add_user("kept")
    talk.add_reply("ok", stopped=False, incomplete=False)
    failed = talk.add_user("never answered")
    talk.forget(failed)
    talk.forget(failed)  # twice is harmless
    assert [m["content"] for m in talk.history] == ["kept", "ok"] and len(talk) == 2
    talk.history[0]["content"] = "changed"
    assert talk.history[0] is not first and talk.history[0]["content"] == "kept"
    talk.clear()
    assert talk.history == [] and talk.request_messages("  ") == []


def test_a_refused_image_is_one_sentence_and_nothing_is_added() -> None:
    talk = Conversation()
    with pytest.raises(InvalidInputError, match="not an image|is a|format"):
        talk.add_user("look", [make_attachment(b"%PDF-1.7 not a picture")])
    assert talk.history == []


def test_an_address_is_passed_through_without_a_thumbnail() -> None:
    picture = make_attachment("http://127.0.0.1:9/cat.png")
    assert picture.url == picture.note == "http://127.0.0.1:9/cat.png"
    assert picture.thumbnail is None


def test_an_image_is_checked_once_not_on_every_turn(sandbox_factory, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from gpucloud_nb import media
    from gpucloud_nb.client.inference import InferenceClient
    from gpucloud_nb.media import images

    checks: list[int] = []
    real_check = images.check_image

    def counted(*args: object, **kwargs: object) -> images.CheckedImage:
        checks.append(1)
        return real_check(*args, **kwargs)  # type: ignore[arg-type]

    sandbox = sandbox_factory(stream_tokens_per_second=500)
    talk = Conversation()
    picture = make_attachment(png(8, 8))  # checked here, once: the send checks no more
    assert isinstance(picture.url, media.CheckedURL)
    # the client's checks (the in-process sandbox's own decoding goes through media.check_image)
    monkeypatch.setattr(images, "check_image", counted)
    per_turn = []
    with InferenceClient(sandbox.inference_url, sandbox.inference_secret) as client:
        for turn in range(6):
            before = len(checks)
            talk.add_user(f"turn {turn}", [picture] if turn == 0 else [])
            reply = client.chat(talk.request_messages("Be brief."))
            talk.add_reply(reply.choices[0].message.content or "", stopped=False, incomplete=False)
            per_turn.append(len(checks) - before)
    sent = talk.request_messages("")
    assert sent[0]["content"][1] == {"type": "image_url", "image_url": {"url": picture.url}}
    assert len(sent) == 12
    # was [1, 1, 1, 1, 1, 1]: the history re-decoded per turn; now the checked data URL is sent as is
    assert per_turn == [0, 0, 0, 0, 0, 0]
