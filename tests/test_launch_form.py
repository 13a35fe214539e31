"""LaunchForm against the sandbox, over real HTTP: checks, launch, progress, volumes, errors."""

from __future__ import annotations

import base64
import html
import json
import re
from datetime import datetime, timedelta, timezone

import pytest
from helpers import ADA, vm_offer, wait_for

from gpucloud_nb import GPUCloud
from gpucloud_nb.client.remote import key_dir
from gpucloud_nb.display import per_hour
from gpucloud_nb.errors import InstanceFailedError, InvalidInputError
from gpucloud_nb.models import InstanceOffer
from gpucloud_nb.widgets import LaunchForm, WaitStopped
from gpucloud_nb.widgets._layout import iter_widgets

SECRET = "sk-widget-secret-0123456789abcdef"
NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)
SSH_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIExample me@laptop"


def pick(cloud: GPUCloud, deployment_type: str, *, cloud_init: bool | None = None,
         volumes: bool | None = None) -> InstanceOffer:
    sellers = {o.cloud_provider.id for o in cloud.volumes.offers()}
    for offer in cloud.instances.offers(deployment_type=deployment_type, available=True,
                                        sort="price"):
        if cloud_init is not None and offer.cloud_init_available != cloud_init:
            continue
        if volumes is not None and (offer.cloud.id in sellers) != volumes:
            continue
        return offer
    raise AssertionError("no such offer in the sandbox")




def assert_disabled_because(form: LaunchForm, sentence: str) -> None:
    assert form.problem is not None and sentence in form.problem, form.problem
    assert form.launch_button.disabled
    assert html.escape(form.problem) in form.reason.value


# the form's checks ---------------------------------------------------------------------------


def test_prefilled_form_and_each_invalid_state(shared_cloud: GPUCloud) -> None:
    offer = pick(shared_cloud, "vm", cloud_init=True, volumes=True)
    form = LaunchForm(shared_cloud, offer)
    assert form.offer.value == offer and form.offer.disabled
    assert form.region.value == offer.available_regions[0]
    assert [v for _, v in form.region.options] == list(offer.available_regions)
    assert form.os.value == offer.configuration.os[0]
    assert form.vm_box.layout.display is None and form.container_box.layout.display == "none"
    assert form.cloud_init_box.layout.display is None
    assert "$" in form.cost.value and "/day" in form.cost.value

    assert_disabled_because(form, "Give the instance a name.")
    form.fill(name="train-1")
    assert form.problem is None and not form.launch_button.disabled and form.reason.value == ""

    form.fill(region="mars-1")
    assert_disabled_because(form, "is not offered in region 'mars-1'")
    form.fill(region=offer.available_regions[0], os=None)
    assert_disabled_because(form, "Choose an OS image for this vm offer.")
    form.fill(os="windows-11")
    assert_disabled_because(form, "has no OS image 'windows-11'")
    form.fill(os=offer.configuration.os[-1], ssh_key=SSH_KEY, ssh_key_id="key-1")
    assert form.problem is None  # both together, as the cloud's docs send them: the key wins
    form.fill(ssh_key_id=None, volume_id="vol-missing")
    assert_disabled_because(form, "Volume vol-missing not found.")
    form.fill(volume_id=None)
    assert form.problem is None
    with pytest.raises(TypeError, match="colour"):
        form.fill(colour="red")


def test_typing_updates_the_reason(shared_cloud: GPUCloud) -> None:
    form = LaunchForm(shared_cloud, pick(shared_cloud, "vm"))
    form.name.value = "typed"
    assert form.problem is None and not form.launch_button.disabled
    form.name.value = "   "
    assert_disabled_because(form, "Give the instance a name.")


def test_container_offer_launches_the_image_it_shows_and_needs_one(shared_cloud: GPUCloud) -> None:
    """The image shown is the field's value (not a grey placeholder): launchable as shown."""
    offer = pick(shared_cloud, "container")
    form = LaunchForm(shared_cloud, offer, name="serve")
    assert form.container_box.layout.display is None and form.vm_box.layout.display == "none"
    assert form.image.value == "vllm/vllm-openai:latest" and not form.image.placeholder
    assert form.problem is None and not form.launch_button.disabled
    assert form.body["dockerContainer"] == {"image": "vllm/vllm-openai:latest"}
    assert "vm" not in form.body
    form.image.value = "  "
    assert_disabled_because(form, "Give the container image to run")


def test_cloud_init_only_where_the_offer_runs_it(shared_cloud: GPUCloud) -> None:
    offer = pick(shared_cloud, "vm", cloud_init=False)
    form = LaunchForm(shared_cloud, offer, name="no-init")
    assert form.cloud_init_box.layout.display == "none"
    assert "does not run cloud-init" in form.cloud_init_note.value
    form.fill(cloud_init="#cloud-config\npackages: [htop]\n")
    assert_disabled_because(form, "does not support cloud-init scripts")
    assert form.cloud_init_box.layout.display is None  # the script is visible, so it can be removed
    form.fill(cloud_init=None)
    assert form.problem is None


def test_cloud_init_upload_fills_the_script(shared_cloud: GPUCloud, tmp_path) -> None:
    form = LaunchForm(shared_cloud, pick(shared_cloud, "vm", cloud_init=True), name="init")
    script = b"#!/bin/sh\necho ready > /tmp/ready\n"
    form.cloud_init_file.value = ({"name": "init.sh", "type": "text/x-sh", "size": len(script),
                                   "content": memoryview(script), "last_modified": NOW},)
    assert form.cloud_init.value == script.decode()
    assert "init.sh" in form.status.text and form.cloud_init_file.value == ()
    assert base64.b64decode(form.body["vm"]["base64CloudInitScript"]) == script
    form.cloud_init_file.value = ({"name": "x.bin", "type": "", "size": 2,
                                   "content": memoryview(b"\xff\xfe"), "last_modified": NOW},)
    assert form.status.is_error and "not UTF-8" in form.status.text
    path = tmp_path / "init.yaml"
    path.write_text("#cloud-config\n")
    form.fill(cloud_init=path)
    assert form.cloud_init.value == "#cloud-config\n"


def test_cost_cap_disables_launch(sandbox, observer: GPUCloud) -> None:
    offer = pick(observer, "vm")
    with GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url,
                  max_hourly_cost=offer.hourly_price / 2) as capped:
        form = LaunchForm(capped, offer, name="too-dear")
        assert_disabled_because(form, "above the cap")
        assert "Cap $" in form.cost.value

    running = observer.instances.create(
        name="already", cloud_provider=offer.cloud.id, instance_id=offer.instance_id,
        region=offer.available_regions[0], vm={"os": offer.configuration.os[0]})
    with GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url,
                  max_hourly_cost=offer.hourly_price * 1.5) as capped:
        form = LaunchForm(capped, offer, name="second")
        assert_disabled_because(form, "above the cap")
        assert "already used" in form.cost.value
        observer.instances.delete(running.id)
        form.refresh()
        assert form.problem is None


def test_the_form_counts_endpoints_at_their_most_containers_as_a_create_does(
        sandbox, observer: GPUCloud) -> None:
    """#38: a deployed endpoint's $/h (at its most containers) counts against the form's cap."""
    offer = pick(observer, "vm")
    cap = offer.hourly_price + 1.0  # the offer alone fits; with the endpoint's $1.50/h it does not
    observer.inference_instances.create(name="served", model="sandbox-vision-1", min=1, max=2)
    with GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url,
                  max_hourly_cost=cap) as capped:
        form = LaunchForm(capped, offer, name="beside-it")
        total = offer.hourly_price + 1.5  # two A10 containers at $0.75/h
        assert_disabled_because(form, (
            f"Launching this {per_hour(offer.hourly_price)} offer would bring pending and active "
            f"instances and endpoints to {per_hour(total)}, above the cap of {per_hour(cap)} "
            "(max_hourly_cost)."))
        assert "by endpoints (at their most containers)" in form.cost.value
        assert html.escape(per_hour(1.5)) in form.cost.value
        with pytest.raises(InvalidInputError, match="instances and endpoints"):
            form.launch().result(timeout=30)
        assert capped.instances.list() == []  # nothing was sent
        observer.inference_instances.stop("served")  # a stopped endpoint bills nothing
        form.refresh()
        assert form.problem is None and not form.launch_button.disabled


def test_offer_dropdown_when_no_offer_is_given(shared_cloud: GPUCloud) -> None:
    form = LaunchForm(shared_cloud)
    assert_disabled_because(form, "Choose an offer to launch.")
    offers = [v for _, v in form.offer.options if v is not None]
    assert offers and all(o.is_available for o in offers)
    container = next(o for o in offers if o.deployment_type == "container")
    form.offer.value = container
    assert [v for _, v in form.region.options] == list(container.available_regions)
    form.fill(name="x", image="busybox")
    assert form.problem is None
    vm = next(o for o in offers if o.deployment_type == "vm")
    form.fill(offer=vm.instance_id)
    assert form.offer.value == vm and form.os.value == vm.configuration.os[0]


# launching -----------------------------------------------------------------------------------


def test_launch_by_click_follows_progress_to_active(cloud: GPUCloud, observer: GPUCloud) -> None:
    offer = pick(cloud, "vm", cloud_init=True)
    form = LaunchForm(cloud, offer)
    form.name.value = "train-1"
    form.ssh_key.value = SSH_KEY
    form.launch_button.click()
    assert form.future is not None
    assert form.launching and form.launch_button.disabled
    assert form.progress_box.layout.display is None and form.stop_button.layout.display is None
    details = form.future.result(timeout=10)

    assert details.status == "active" and form.instance == details
    assert form.progress.value == 1.0 and form.progress.bar_style == "success"
    assert "active after" in form.elapsed.value
    assert details.ip and details.ip in form.result.value
    # The form's key is not this client's: the command names no -i, but the host key is stored.
    assert form.ssh_command.value == cloud.instances.ssh_command(details.id)
    assert form.ssh_command.value.startswith("ssh -o UserKnownHostsFile=")
    assert f"HostKeyAlias={details.id}" in form.ssh_command.value
    known = (key_dir(None) / "known_hosts").read_text().splitlines()
    assert any(line.startswith(f"{details.id} ssh-") for line in known)
    assert "$" in form.result.value and "/h" in form.result.value
    assert form.status.text == "train-1 is active."
    assert not form.launching and not form.launch_button.disabled
    assert form.stop_button.layout.display == "none"

    seen = observer.instances.get(details.id)
    assert seen.name == "train-1" and seen.status == "active" and seen.os == offer.configuration.os[0]
    assert seen.id in cloud.created_instance_ids


def test_launch_from_code_returns_a_future(cloud: GPUCloud, observer: GPUCloud) -> None:
    offer = pick(cloud, "container")
    form = LaunchForm(cloud, offer).fill(name="serve-1", image="vllm/vllm-openai:latest")
    future = form.launch()
    assert form.launch() is future  # no second launch while the first runs
    details = future.result(timeout=10)
    assert details.docker_image == "vllm/vllm-openai:latest"
    assert [i.name for i in observer.instances.list()] == ["serve-1"]


def test_auto_delete_field_sets_a_timer(through_gateway: GPUCloud) -> None:
    cloud = through_gateway
    offer = pick(cloud, "vm")
    form = LaunchForm(cloud, offer).fill(name="timed", delete_after="30m")
    assert "Auto-deletes after 30 min" in form.cost.value
    assert f"at most ${offer.hourly_price / 2:.2f}" in form.cost.value
    details = form.launch().result(timeout=10)
    assert 29 * 60 < cloud.auto_delete.remaining(details.id) <= 30 * 60
    form.auto_delete.value = ""
    assert "Auto-deletes" not in form.cost.value
    cloud.auto_delete.cancel_all()


def test_the_idle_field_launches_with_delete_when_idle_watched_by_the_gateway(
        box: GPUCloud, cloud: GPUCloud, sandbox) -> None:
    cloud.sandbox = sandbox  # the sandbox itself keeps no idle limit: the note says so
    unwatched = LaunchForm(cloud, pick(cloud, "vm")).fill(name="idle-form",
                                                          delete_when_idle="30m")
    assert "nothing watches it without a gateway" in unwatched.idle_note.value
    form = LaunchForm(box, pick(box, "vm")).fill(name="idle-form", delete_when_idle="30m")
    assert "watched by the gateway" in form.idle_note.value  # as connect() makes it
    details = form.launch().result(timeout=10)
    state = box.idle_delete.states()[details.id]
    assert state.limit == 30 * 60 and not state.warning
    form.idle_delete.value = ""
    assert form.idle_note.value == ""


@pytest.mark.parametrize("kept_by", ["gateway", "nobody"])
def test_the_auto_delete_preview_says_who_keeps_the_timer(request, kept_by) -> None:
    if kept_by == "gateway":
        cloud = request.getfixturevalue("through_gateway")
        observer = GPUCloud(api_key=ADA, base_url=cloud.base_url)
    else:
        cloud, observer = request.getfixturevalue("cloud"), request.getfixturevalue("observer")
        cloud.sandbox = request.getfixturevalue("sandbox")  # the sandbox itself keeps none
    form = LaunchForm(cloud, pick(cloud, "vm")).fill(name="timed", delete_after="30m")
    if kept_by == "nobody":  # the cloud directly: nothing would keep it, and it says so
        assert "Auto-delete needs a gateway to keep it" in form.cost.value
        assert "Auto-deletes after" not in form.cost.value
        return
    assert (f"Auto-deletes after 30 min, by the {kept_by}, even if this kernel stops: "
            in form.cost.value)
    details = form.launch().result(timeout=10)
    # What it said is true: the timer is kept elsewhere, so another client sees it.
    assert observer.auto_delete.remaining(details.id) is not None
    cloud.auto_delete.cancel_all()
    observer.close()


def test_colours_come_from_the_theme_and_the_name_hint_is_a_hint(sandbox, observer) -> None:
    with GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url,
                  max_hourly_cost=0.01) as capped:
        offer = pick(capped, "vm", cloud_init=False)
        form = LaunchForm(capped, offer)
        assert form.name.placeholder == "e.g. train-1" and form.name.value == ""
        form.fill(name="x", cloud_init="#cloud-config\n")
        shown = [w.value for w in iter_widgets(form) if isinstance(getattr(w, "value", None), str)]
        coloured = [v for v in shown if "color:" in v]
        assert coloured, "the cap, the reason and the cloud-init note are coloured"
        for value in shown:
            assert not re.search(r"#[0-9a-fA-F]{3,6}\b|rgb\(", value), value
        assert any("var(--jp-warn-color0)" in v for v in coloured)
        assert any("var(--jp-error-color1)" in v for v in coloured)  # over the cap


def test_launch_with_an_invalid_form_fails_fast(cloud: GPUCloud, observer: GPUCloud) -> None:
    form = LaunchForm(cloud, pick(cloud, "vm"))
    future = form.launch()
    with pytest.raises(InvalidInputError, match="Give the instance a name."):
        future.result(timeout=30)
    assert form.status.is_error and observer.instances.list() == []


def test_create_volume_shortcut_then_launch_with_it(cloud: GPUCloud, observer: GPUCloud) -> None:
    offer = pick(cloud, "vm", volumes=True)
    volume_offer = next(v for v in cloud.volumes.offers() if v.cloud_provider.id == offer.cloud.id)
    minimum = int(volume_offer.min_size_in_gb)
    form = LaunchForm(cloud, offer, name="with-data")
    assert form.volume.value is None and form.volume_create_box.layout.display == "none"
    form.volume_create_toggle.click()
    assert form.volume_create_box.layout.display is None
    assert f"at least <b>{minimum:g} GB</b>" in form.volume_info.value

    form.volume_name.value = "data"
    form.volume_size.value = minimum - 1
    assert form.volume_create_button.disabled
    assert f"at least {minimum:g} GB" in form.volume_reason.value
    form.volume_create_button.click()  # disabled in a browser; from code it still refuses
    assert observer.volumes.list() == []
    with pytest.raises(InvalidInputError):
        form.create_volume()

    form.volume_size.value = minimum + 5
    assert not form.volume_create_button.disabled
    form.volume_create_button.click()
    volumes = observer.volumes.list()
    assert [(v.name, v.size_in_gb, v.region) for v in volumes] == \
        [("data", minimum + 5, form.region.value)]
    assert form.volume.value == volumes[0].id and "selected" in form.volume_status.text
    assert "+ volume data" in form.cost.value

    details = form.launch().result(timeout=10)
    assert volumes[0].id in json.dumps(observer.instances.get(details.id).volumes)
    assert volumes[0].id in form.result.value


def test_existing_volumes_of_the_same_provider_and_region_are_offered(
        cloud: GPUCloud, observer: GPUCloud) -> None:
    offer = pick(cloud, "vm", volumes=True)
    region = offer.available_regions[0]
    here = observer.volumes.create(name="here", cloud_provider=offer.cloud.id, region=region,
                                   size_in_gb=100)
    form = LaunchForm(cloud, offer, name="vol")
    assert [v for _, v in form.volume.options] == [None, here.id]
    form.fill(volume_id=here.id)
    assert form.problem is None and form.body["volumeId"] == here.id


def test_server_error_is_one_sentence(cloud: GPUCloud, observer: GPUCloud) -> None:
    form = LaunchForm(cloud, pick(cloud, "vm"), name="job-sandbox-fail")
    future = form.launch()
    with pytest.raises(InstanceFailedError):
        future.result(timeout=10)
    assert form.status.is_error and "gpucloud-error" in form.status._dom_classes
    assert "is error" in form.status.text and "Traceback" not in form.status.value
    assert form.progress.bar_style == "danger" and not form.launch_button.disabled
    assert observer.instances.list()[0].status == "error"


def test_client_refusal_is_shown(sandbox, observer: GPUCloud) -> None:
    offer = pick(observer, "vm")
    with GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url,
                  max_hourly_cost=offer.hourly_price * 1.5) as capped:
        form = LaunchForm(capped, offer, name="late")
        assert form.problem is None
        observer.instances.create(  # meanwhile, someone else launches
            name="other", cloud_provider=offer.cloud.id, instance_id=offer.instance_id,
            region=offer.available_regions[0], vm={"os": offer.configuration.os[0]})
        with pytest.raises(InvalidInputError, match="above the cap"):
            form.launch().result(timeout=10)
        assert "above the cap" in form.status.text and form.status.is_error
    assert [i.name for i in observer.instances.list()] == ["other"]


def test_unexpected_errors_are_labelled(shared_cloud: GPUCloud, monkeypatch) -> None:
    def broken(*_: object) -> None:
        raise RuntimeError("socket on fire")

    monkeypatch.setattr(shared_cloud.instances, "create_from", broken)
    form = LaunchForm(shared_cloud, pick(shared_cloud, "vm"), name="oops")
    form.launch_button.click()
    with pytest.raises(RuntimeError):
        form.future.result(timeout=5)
    assert form.status.text == "Something went wrong: RuntimeError: socket on fire"


def test_stop_waiting_leaves_the_instance_running(sandbox_factory) -> None:
    sandbox = sandbox_factory(launch_seconds=30)
    with GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url) as cloud:
        form = LaunchForm(cloud, pick(cloud, "vm"), name="slow")
        future = form.launch()
        wait_for(lambda: "pending…" in form.elapsed.value)
        assert form.instance is not None and form.instance.status == "pending"
        assert 0 <= form.progress.value < 0.95
        form.stop_button.click()
        with pytest.raises(WaitStopped, match="keeps launching"):
            future.result(timeout=30)
        assert "keeps launching" in form.status.text and not form.launching
        assert form.stop_button.layout.display == "none"
        assert cloud.instances.get(form.instance.id).status == "pending"
        form.stop()  # nothing to stop any more


def test_no_widget_state_holds_the_api_key(sandbox_factory) -> None:
    sandbox = sandbox_factory(api_key=SECRET)
    with GPUCloud(api_key=SECRET, base_url=sandbox.management_url) as cloud:
        form = LaunchForm(cloud, pick(cloud, "vm"), name="secret-test")
        form.launch().result(timeout=10)
        states = [json.dumps(w.get_state(), default=str) for w in iter_widgets(form)]
        assert len(states) > 30
        assert not any(SECRET in state for state in states)
        assert SECRET not in repr(form)


def test_cost_cap_fails_closed_in_the_form(sandbox_factory) -> None:
    """A running instance reporting NaN, or an offer priced null: same sentence as the client."""
    import copy

    from gpucloud_nb.sandbox import catalogue

    base = catalogue.instance_offers()[0]
    offers = []
    for instance_id, price in (("nan-price", "NaN"), ("null-price", None), ("pricey", 100.0)):
        made = copy.deepcopy(base)
        made.update(instanceId=instance_id, hourlyPrice=price)
        offers.append(made)
    sandbox = sandbox_factory(offers=offers)
    region = next(a["region"] for a in base["availability"] if a["available"])
    with GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url,
                  max_hourly_cost=1000.0) as capped:
        by_id = {o.instance_id: o for o in capped.instances.offers()}
        form = LaunchForm(capped, by_id["null-price"], name="free?")
        assert_disabled_because(form, "Offer 'null-price' from")
        assert "has no usable hourlyPrice" in form.problem and "cannot be checked" in form.problem
        with pytest.raises(InvalidInputError, match="has no usable hourlyPrice"):
            capped.instances.create(name="free?", cloud_provider=base["cloud"]["_id"],
                                    instance_id="null-price", region=region,
                                    vm={"os": base["configuration"]["os"][0]})

    with GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url) as uncapped:
        uncapped.instances.create(name="odd-one", cloud_provider=base["cloud"]["_id"],
                                  instance_id="nan-price", region=region,
                                  vm={"os": base["configuration"]["os"][0]})
    with GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url,
                  max_hourly_cost=5.0) as capped:
        pricey = next(o for o in capped.instances.offers() if o.instance_id == "pricey")
        form = LaunchForm(capped, pricey, name="big")
        assert_disabled_because(form, "Instance 'odd-one' (")
        assert "reports no usable hourlyPrice" in form.problem
        with pytest.raises(InvalidInputError, match="odd-one"):
            form.launch().result(timeout=10)
        assert [i.name for i in capped.instances.list()] == ["odd-one"]


def test_launch_form_keys_offers_by_provider_and_instance_id(sandbox_factory) -> None:
    from samples import same_id_two_providers

    sandbox = sandbox_factory(offers=same_id_two_providers())
    with GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url) as cloud:
        ambiguous = LaunchForm(cloud, "gpu-1x", name="x")
        assert ambiguous.offer.value is None and ambiguous.launch_button.disabled
        assert ambiguous.status.is_error
        assert ambiguous.status.text.startswith("Offer 'gpu-1x' is sold by 2 providers: Cheap Cloud")
        assert "Pricey Cloud" in ambiguous.status.text and "provider=" in ambiguous.status.text

        for provider in ("Cheap Cloud", "0123456789abcdef01234567"):
            form = LaunchForm(cloud, "gpu-1x", provider=provider, name="x")
            assert (form.offer.value.cloud.name, form.offer.value.hourly_price) == \
                ("Cheap Cloud", 1.0)
        wrong = LaunchForm(cloud, "gpu-1x", provider="Nobody", name="x")
        assert "Provider 'Nobody' sells no offer 'gpu-1x'" in wrong.status.text

        pricey = next(o for o in cloud.instances.offers() if o.cloud.name == "Pricey Cloud")
        form = LaunchForm(cloud, pricey, name="big")
        details = form.launch().result(timeout=10)
        assert (details.provider, details.hourly_price) == ("Pricey Cloud", 50.0)

        chooser = LaunchForm(cloud)  # both listed; fill() by id alone is ambiguous
        with pytest.raises(InvalidInputError, match="sold by 2 providers"):
            chooser.fill(offer="gpu-1x")


def test_through_a_gateway_the_spent_budget_and_its_refusal_are_one_sentence(
        upstream, gateway_factory) -> None:
    from gpucloud_nb.errors import BadRequestError
    from tests.test_client_gateway import ADA, cloud, spent_budget

    gateway = spent_budget(upstream, gateway_factory)
    with cloud(gateway, ADA) as ada:
        form = LaunchForm(ada, vm_offer(ada), name="one-more")
        assert "was spent at" in form.status.text and "deleted: spender." in form.status.text
        future = form.launch()
        with pytest.raises(BadRequestError) as refused:
            future.result(timeout=60)
        assert refused.value.status_code == 402
        assert form.status.is_error and form.status.text == refused.value.message
        assert "left" in form.status.text and "nothing was launched" in form.status.text
        assert "Traceback" not in form.status.value
        assert [i.name for i in ada.instances.list()] == ["spender"]


def test_the_duration_fields_take_units_and_refuse_a_bare_number(
        through_gateway: GPUCloud) -> None:
    """One rule for every duration typed (gpucloud_nb.durations): "1h30m", "90s"; "30" alone
    is refused in one sentence, and nothing is launched."""
    cloud = observer = through_gateway  # a gateway keeps the timer
    form = LaunchForm(cloud, pick(cloud, "vm")).fill(name="typed", delete_after="1h30m")
    assert "Auto-deletes after 1 h 30 min" in form.cost.value and form.problem is None
    form.idle_delete.value = "30"
    assert form.problem == ("Delete when idle for needs a unit: '30' could be minutes or "
                            "seconds; write e.g. 30m or 90s.")
    assert form.launch_button.disabled and "needs a unit" in form.reason.value
    with pytest.raises(InvalidInputError, match="needs a unit"):
        form.launch().result(timeout=10)
    assert observer.instances.list() == []
    form.fill(delete_when_idle=timedelta(minutes=45), delete_after=7200)  # as the API takes them
    assert (form.idle_delete.value, form.auto_delete.value) == ("45m", "2h")
    form.fill(delete_when_idle=-5)
    assert "must be written like" in (form.problem or "")
