"""``DeployForm`` and ``ChatWidget`` on an inference instance, against a sandbox over real HTTP."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from helpers import wait_for

from gpucloud_nb import GPUCloud
from gpucloud_nb.sandbox import Sandbox
from gpucloud_nb.widgets._layout import iter_widgets
from gpucloud_nb.widgets.deploy_form import CSS_CLASSES, DeployForm

WAIT = 60.0


@pytest.fixture
def box(sandbox_factory: Callable[..., Sandbox]) -> Sandbox:
    return sandbox_factory(launch_seconds=0.5, cold_start_seconds=1.5)


@pytest.fixture
def cloud(box: Sandbox) -> Iterator[GPUCloud]:
    with GPUCloud(api_key=box.api_key, base_url=box.management_url) as client:
        yield client


@pytest.fixture
def form(cloud: GPUCloud) -> Iterator[DeployForm]:
    made = DeployForm(cloud)
    yield made
    made.join(WAIT)
    made.close()


def test_the_form_shows_price_and_capacity_before_deploying(form: DeployForm) -> None:
    classes = {c for w in iter_widgets(form) for c in getattr(w, "_dom_classes", ())}
    assert set(CSS_CLASSES.values()) <= classes
    form.choose(model="sandbox-vision-1", min=0, max=2)
    assert form.price_text == "$0.75/h per container: $0.00/h at min 0, up to $1.50/h at max 2."
    form.choose(hardware="h100-80gb")  # none in Frankfurt: Virginia, which has some, is chosen
    regions = dict((value, label) for label, value in form.children[3].options)
    assert "no capacity" in regions["eu-central-1"] and "capacity 2" in regions["us-east-1"]
    assert form.children[3].value == "us-east-1"
    assert "$2.99/h per container" in form.price_text


def test_a_deploy_waits_until_active_and_shows_the_address(form: DeployForm,
                                                           cloud: GPUCloud) -> None:
    form.choose(model="sandbox-vision-1", name="from-form", min=1, max=1, cooldown=30)
    made = form.deploy()
    assert made is not None and made.name == "from-form"
    form.join(WAIT)
    assert form.status.kind == "success" and form.details is not None
    assert form.status.text == f"from-form is active at {form.details.address}"
    assert cloud.inference_instances.get("from-form").containers[0].scale.cooldown_period == 30


@pytest.mark.parametrize(("choices", "words"), [
    ({"name": ""}, "Give the endpoint a name."),
    ({"name": "x", "min": 3, "max": 2}, "Min (3) is more than max (2)."),
    ({"name": "x", "hardware": "h100-80gb", "region": "eu-central-1"}, "has no capacity"),
])
def test_each_refusal_is_one_sentence_and_nothing_is_deployed(
        form: DeployForm, cloud: GPUCloud, choices: dict[str, object], words: str) -> None:
    form.choose(**choices)  # type: ignore[arg-type]
    assert form.deploy() is None
    assert form.status.is_error and words in form.status.text
    assert "\n" not in form.status.text and cloud.inference_instances.list() == []


def test_the_chat_says_waking_up_and_answers_after_a_cold_start(cloud: GPUCloud) -> None:
    from gpucloud_nb.widgets.chat import ChatWidget

    cloud.inference_instances.create(name="sleepy", model="sandbox-vision-1", min=0, max=1,
                                     cooldown=5)  # long enough to stay awake between two turns
    cloud.inference_instances.wait_until_active("sleepy", poll_interval=0.05)
    wait_for(lambda: cloud.inference_instances.get("sleepy").scaled_to_zero, timeout=WAIT)
    client = cloud.inference_instances.chat_client("sleepy")
    chat = ChatWidget(client)
    shown: list[str] = []
    chat.status.observe(lambda change: shown.append(change["new"]), names="value")
    try:
        turn = chat.send("Hello").wait(WAIT)
        assert turn.status == "done" and turn.text
        assert any("Waking up sleepy" in text for text in shown), shown
        assert cloud.inference_instances.get("sleepy").ready == 1
        again = chat.send("And again").wait(WAIT)  # awake now: no waking up
        assert again.status == "done"
        assert sum("Waking up" in text for text in shown) == 1
    finally:
        chat.close()
        client.close()


def test_a_form_opened_on_a_model_shows_its_regions_and_price_at_once(cloud: GPUCloud) -> None:
    """Seen in the browser: a form opened on a model whose default hardware is not the first
    listed (the A10 after the T4) showed no region and no price until a field changed, since
    the hardware was set before anything observed it."""
    form = DeployForm(cloud, model="sandbox-vision-1")
    try:
        region, price = form.children[3], form.children[7]
        assert form.children[2].value == "a10-24gb" and region.options
        assert region.value == "eu-central-1" and "capacity" in dict(
            (v, label) for label, v in region.options)["eu-central-1"]
        assert "$0.75/h per container: $0.00/h at min 0, up to $0.75/h at max 1." in price.value
    finally:
        form.close()
