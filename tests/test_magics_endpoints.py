"""``%gpucloud endpoints`` and ``%gpucloud chat NAME`` through IPython's shell, against a sandbox;
the transcript is checked for the key and secret at teardown (see tests/test_magics.py)."""

from __future__ import annotations

import pandas as pd
import pytest
from helpers import wait_for

from gpucloud_nb import GPUCloud
from gpucloud_nb.magics_parse import parse
from tests.test_magics import (  # noqa: F401 (fixtures)
    API_KEY,
    Magic,
    _answers,
    _one_sentence,
    cloud,
    magic,
    sandbox_box,
    shell,
)


def test_models_and_hardwares_are_frames_with_prices(magic: Magic, cloud: GPUCloud) -> None:  # noqa: F811 (fixtures)
    models = magic("endpoints models").value
    assert isinstance(models, pd.DataFrame) and "sandbox-vision-1" in set(models.id)
    hardwares = magic("endpoints hardwares").value
    assert isinstance(hardwares, pd.DataFrame) and hardwares.hourlyPrice.notna().all()


def test_create_list_stop_start_delete(magic: Magic, cloud: GPUCloud,  # noqa: F811
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    run = magic("endpoints create chat --model sandbox-vision-1 --min 1 --max 2 --cooldown 60")
    assert run.value is None and run.out.startswith("Deploying chat (")
    wait_for(lambda: cloud.inference_instances.get("chat").status == "ACTIVE")
    listed = magic("endpoints").value
    assert list(listed.name) == ["chat"] and listed.ready[0] == 1
    assert listed.maxHourly[0] == pytest.approx(1.5)
    assert "Stopped chat: it is DISABLED." in magic("endpoints stop chat").out
    assert "Started chat: it is PENDING." in magic("endpoints start chat").out
    prompts = _answers(monkeypatch, "n")
    assert "Cancelled" in magic("endpoints delete chat").out and prompts
    assert "Deleted endpoint chat." in magic("endpoints delete chat --yes").out
    assert cloud.inference_instances.get("chat").status in ("DELETING", "DELETED")


def test_create_without_a_name_is_the_deploy_form(magic: Magic, cloud: GPUCloud) -> None:  # noqa: F811 (fixtures)
    from gpucloud_nb.widgets.deploy_form import DeployForm

    form = magic("endpoints create --model sandbox-speech-1").value
    assert isinstance(form, DeployForm)
    form.close()


@pytest.mark.parametrize(("line", "words"), [
    ("endpoints create chat", "Give the model"),
    ("endpoints create chat --model gpt-9", "Unknown model 'gpt-9'"),
    ("endpoints create chat --model sandbox-vision-1 --min 3 --max 2", "is more than"),
    ("endpoints stop nope", "Inference instance nope not found"),
    ("endpoints frobnicate", "unknown subcommand 'frobnicate'"),
    ("endpoints create chat --model sandbox-vision-1 --min -1", "argument --min"),
])
def test_each_mistake_is_one_sentence(magic: Magic, cloud: GPUCloud, line: str,  # noqa: F811
                                      words: str) -> None:
    assert words in _one_sentence(magic(line))
    assert cloud.inference_instances.list() == []


def test_chat_by_endpoint_name(magic: Magic, cloud: GPUCloud) -> None:  # noqa: F811 (fixtures)
    from gpucloud_nb.widgets.chat import ChatWidget

    cloud.inference_instances.create(name="talk", model="sandbox-vision-1", min=1)
    widget = magic("chat talk").value
    assert isinstance(widget, ChatWidget)
    widget.close()
    assert _one_sentence(magic("chat nobody")).startswith(
        "The endpoint must be a URL starting with http:// or https://, or the name of one")


def test_the_grammar_defaults_to_the_list() -> None:
    assert parse("endpoints").handler == "endpoints"
    assert parse("endpoints").endpoints_command in (None, "list")
    assert parse("endpoints create x --model m --max 3").max == 3
