"""magics_parse.py: the %gpucloud grammar; usage errors are one line, secrets are refused unread."""

from __future__ import annotations

import pytest

from gpucloud_nb.magics_parse import HelpShown, Stop, parse


def test_a_line_parses_into_its_command() -> None:
    args = parse("offers --gpus 2 --all")
    assert (args.command, args.gpus, args.handler) == ("offers", 2, "offers")
    assert parse("volumes delete vol-1 --yes").volumes_command == "delete"


@pytest.mark.parametrize("line", ["connect --api-key sk-live-0123456789abcdef",
                                  "chat http://127.0.0.1:9 --secret=s3cr3t-value-here"])
def test_a_secret_option_is_refused_without_echoing_the_value(line: str) -> None:
    with pytest.raises(Stop) as stopped:
        parse(line)
    assert "refused" in stopped.value.message
    assert "sk-live" not in stopped.value.message and "s3cr3t" not in stopped.value.message


def test_unknown_words_are_one_line_with_values_hidden() -> None:
    with pytest.raises(Stop) as unknown:
        parse("offerz")
    assert unknown.value.message == "%gpucloud: unknown subcommand 'offerz'; try %gpucloud --help"
    with pytest.raises(Stop) as extra:
        parse("instances --token=abc123 hidden-value")
    message = extra.value.message
    assert "unrecognized arguments: --token=…" in message and "abc123" not in message
    assert "\n" not in message


def test_help_is_shown_not_exited(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(HelpShown):
        parse("")
    assert "%gpucloud" in capsys.readouterr().out
    with pytest.raises(Stop, match="check the quotes"):
        parse('offers --region "eu')
