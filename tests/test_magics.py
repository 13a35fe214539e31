"""The ``%gpucloud`` magics, driven through IPython's own shell against a per-test sandbox.

Every test that uses the ``magic`` fixture records all the magic printed and returned; at teardown
the record is scanned for the sandbox's API key and inference secret, which must never appear.
"""

from __future__ import annotations

import builtins
import getpass
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import pytest
from helpers import launch_active, wait_for
from IPython.core.interactiveshell import InteractiveShell

import gpucloud_nb.magics as magics
from gpucloud_nb import GPUCloud
from gpucloud_nb.models import InstanceDetails, InstanceOffer, Volume
from tests.helpers import ADA, PERSONAL

API_KEY = "sk-magic-SECRET-0123456789"
INFERENCE_SECRET = "sk-infer-SECRET-9876543210"
SECRETS = (API_KEY, INFERENCE_SECRET)


@dataclass
class Run:
    """What one ``%gpucloud`` line returned and printed."""

    value: Any
    out: str
    err: str

    @property
    def text(self) -> str:
        return self.out + self.err


@dataclass
class Magic:
    """Runs ``%gpucloud`` lines in an IPython shell and keeps a transcript of everything seen."""

    shell: InteractiveShell
    capsys: pytest.CaptureFixture[str]
    transcript: list[str] = field(default_factory=list)

    def __call__(self, line: str) -> Run:
        value = self.shell.run_line_magic("gpucloud", line)
        captured = self.capsys.readouterr()
        self.transcript += [captured.out, captured.err, repr(value), _shown(value)]
        return Run(value, captured.out, captured.err)

    def cell(self, source: str) -> Run:
        """Run a whole cell (as a notebook would), so IPython's own display and errors show."""
        result = self.shell.run_cell(source)
        captured = self.capsys.readouterr()
        self.transcript += [captured.out, captured.err]
        return Run(result.result, captured.out, captured.err)


def _shown(value: Any) -> str:
    if isinstance(value, pd.DataFrame):
        return value.to_string() + value.to_html()
    return str(value)


@pytest.fixture(scope="module")
def shell() -> InteractiveShell:
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "gpucloud_nb")
    return shell


@pytest.fixture
def sandbox_box(sandbox_factory: Callable[..., Any]) -> Any:
    return sandbox_factory(api_key=API_KEY, inference_secret=INFERENCE_SECRET)


@pytest.fixture
def cloud(sandbox_box: Any) -> Iterator[GPUCloud]:
    cloud = GPUCloud(api_key=API_KEY, base_url=sandbox_box.management_url)
    magics.use(cloud)
    yield cloud
    magics.use(None)
    cloud.close()


@pytest.fixture(scope="module")
def shared_box() -> Iterator[Any]:
    """One sandbox for the tests that only read (offers, errors), to keep the module quick."""
    from gpucloud_nb.sandbox import Sandbox

    with Sandbox(api_key=API_KEY, inference_secret=INFERENCE_SECRET) as box:
        yield box


@pytest.fixture
def reader(shared_box: Any) -> Iterator[GPUCloud]:
    """A client of the shared sandbox, in use by the magic; tests using it must not create."""
    cloud = GPUCloud(api_key=API_KEY, base_url=shared_box.management_url)
    magics.use(cloud)
    yield cloud
    magics.use(None)
    cloud.close()


class _Untouchable:
    """A stand-in client that fails the test if a command uses it."""

    def scrub(self, text: str) -> str:  # masking output is not using the cloud
        return text

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        pytest.fail(f"the command used the client ({name}) although it should not")


@pytest.fixture
def no_cloud() -> Iterator[None]:
    """For commands that must fail before any request: any use of the client fails the test."""
    magics.use(_Untouchable())  # type: ignore[arg-type]
    yield
    magics.use(None)


@pytest.fixture
def magic(shell: InteractiveShell, capsys: pytest.CaptureFixture[str],
          monkeypatch: pytest.MonkeyPatch) -> Iterator[Magic]:
    import gpucloud_nb._connect as connecting

    monkeypatch.setattr(connecting, "_announced", set())  # each test is a fresh kernel
    runner = Magic(shell, capsys)
    yield runner
    seen = "\n".join([*runner.transcript, capsys.readouterr().out])
    for secret in SECRETS:
        assert secret not in seen
    magics.use(None)


def _answers(monkeypatch: pytest.MonkeyPatch, *answers: str) -> list[str]:
    """Make ``input()`` answer ``answers`` in turn; returns the prompts it was asked."""
    prompts: list[str] = []
    queue = list(answers)

    def fake_input(prompt: str = "") -> str:
        prompts.append(prompt)
        return queue.pop(0)

    monkeypatch.setattr(builtins, "input", fake_input)
    return prompts


def _one_sentence(run: Run) -> str:
    assert run.value is None
    assert run.out == ""
    lines = run.err.strip().splitlines()
    assert len(lines) == 1, run.err
    assert "Traceback" not in run.text
    return lines[0]


def _regions(cloud: GPUCloud) -> tuple[str, int, str]:
    """A region with one volume provider, a size it accepts, and a region with several."""
    offers = cloud.volumes.offers()
    sellers = {r: [o for o in offers if r in o.regions] for o in offers for r in o.regions}
    lone = sorted(r for r, found in sellers.items() if len(found) == 1)
    crowded = sorted(r for r, found in sellers.items() if len(found) > 1)
    assert lone and crowded, "the sandbox catalogue should have both kinds of region"
    size = int(max(sellers[lone[0]][0].min_size_in_gb, 100))
    return lone[0], size, crowded[0]


def _launch(cloud: GPUCloud, *, provider: str | None = None, region: str | None = None,
            volume_id: str | None = None, name: str = "trainer") -> tuple[InstanceOffer, Any]:
    """Launch a vm instance from the first available offer matching provider and region."""
    for offer in cloud.instances.offers(deployment_type="vm", available=True, sort="price"):
        if provider is not None and offer.cloud.id != provider:
            continue
        regions = [r for r in offer.available_regions if region is None or r == region]
        if regions:
            instance = cloud.instances.create(
                name=name, cloud_provider=offer.cloud.id, instance_id=offer.instance_id,
                region=regions[0], volume_id=volume_id, vm={"os": offer.configuration.os[0]})
            return offer, instance
    raise AssertionError("no offer to launch")


def _instance_with_volume(cloud: GPUCloud, volume_name: str) -> tuple[Volume, Any]:
    """A volume and a vm instance launched with it, wherever a provider sells both."""
    for vol_offer in cloud.volumes.offers():
        for region in vol_offer.regions:
            volume = cloud.volumes.create(name=volume_name, region=region,
                                          cloud_provider=vol_offer.cloud_provider.id,
                                          size_in_gb=max(vol_offer.min_size_in_gb, 10))
            try:
                _, instance = _launch(cloud, provider=vol_offer.cloud_provider.id, region=region,
                                      volume_id=volume.id)
            except AssertionError:
                cloud.volumes.delete(volume.id)
                continue
            return volume, instance
    raise AssertionError("no provider sells both volumes and vm instances in one region")


# --------------------------------------------------------------------------- loading and help


def test_load_ext_registers_the_line_magic(shell: InteractiveShell) -> None:
    assert "gpucloud" in shell.magics_manager.magics["line"]


@pytest.mark.parametrize("line", ["--help", "-h", ""])
def test_help_prints_every_subcommand_and_returns_none(magic: Magic, line: str) -> None:
    run = magic(line)
    assert run.value is None and run.err == ""
    assert run.out.startswith("usage: %gpucloud")
    for synopsis in ("connect [--sandbox | --base-url URL]", "offers [--gpu NAME]", "instances",
                     "instance INSTANCE", "delete INSTANCE [--yes]", "launch [OFFER_ID]",
                     "chat [ENDPOINT]", "spend", "volumes create NAME --size GB --region R [--provider ID]",
                     "volumes delete ID [--yes]"):
        assert f"%gpucloud {synopsis}" in run.out


def test_subcommand_help_prints_its_usage(magic: Magic) -> None:
    run = magic("volumes --help")
    assert run.value is None and run.err == ""
    assert run.out.startswith("usage: %gpucloud volumes")
    assert "%gpucloud volumes get ID" in run.out
    run = magic("volumes create --help")
    assert "usage: %gpucloud volumes create" in run.out and "--provider ID" in run.out
    assert "example:" in run.out


def test_help_in_a_cell_shows_no_traceback(magic: Magic) -> None:
    run = magic.cell("%gpucloud offers --help")
    assert "usage: %gpucloud offers" in run.out
    assert "Traceback" not in run.text and "SystemExit" not in run.text


# --------------------------------------------------------------------------- volumes


def test_volume_life_cycle(magic: Magic, cloud: GPUCloud, monkeypatch: pytest.MonkeyPatch) -> None:
    offers = magic("volumes offers").value
    assert isinstance(offers, pd.DataFrame)
    assert {"providerId", "providerName", "minSizeInGb", "regions"} <= set(offers.columns)
    assert len(offers) == len(cloud.volumes.offers())

    # A region with one volume provider: --provider may be left out.
    region, size, _ = _regions(cloud)
    run = magic(f'volumes create "my data" --size {size} --region {region}')
    volume = run.value
    assert isinstance(volume, Volume) and volume.name == "my data" and volume.size_in_gb == size
    assert run.out == f"Created volume my data ({volume.id}) in {region}, {size} GB.\n"
    assert run.err == ""

    listed = magic("volumes").value
    assert isinstance(listed, pd.DataFrame)
    row = listed[listed["_id"] == volume.id]
    assert list(row["name"]) == ["my data"] and list(row["region"]) == [region]
    assert magic("volumes list").value["_id"].tolist() == listed["_id"].tolist()

    got = magic(f"volumes get {volume.id}").value
    assert isinstance(got, Volume) and got.id == volume.id and got.name == "my data"

    prompts = _answers(monkeypatch, "n")
    run = magic(f"volumes delete {volume.id}")
    assert run.value is None
    assert "Delete volume my data" in prompts[0] and prompts[0].endswith("[y/N] ")
    assert run.out == f"Cancelled: volume my data ({volume.id}) was not deleted.\n"
    assert cloud.volumes.get(volume.id).id == volume.id

    _answers(monkeypatch, "maybe")
    assert "Cancelled" in magic(f"volumes delete {volume.id}").out

    _answers(monkeypatch, " YES ")
    run = magic(f"volumes delete {volume.id}")
    assert run.value is None and run.out == f"Deleted volume my data ({volume.id}).\n"
    assert volume.id not in magic("volumes").value["_id"].tolist()
    assert _one_sentence(magic(f"volumes get {volume.id}")) == f"Volume {volume.id} not found."


def test_the_cheapest_provider_chosen_is_one_that_sells_the_size_asked(magic: Magic,
                                                                       cloud: GPUCloud) -> None:
    # The cheapest provider in a region may have a larger minimum than the size asked for.
    offers = cloud.volumes.offers()
    region, size = next(
        (r, s) for r in sorted({r for o in offers for r in o.regions})
        for here in [[o for o in offers if r in o.regions]]
        for s in sorted({o.min_size_in_gb for o in here})
        if min(here, key=lambda o: o.price_per_gb_per_hour).min_size_in_gb > s)
    fitting = [o for o in offers if region in o.regions and o.min_size_in_gb <= size]
    cheapest = min(fitting, key=lambda o: o.price_per_gb_per_hour).cloud_provider
    run = magic(f"volumes create small --size {size:g} --region {region}")
    assert isinstance(run.value, Volume), run.err
    assert run.value.cloud_provider.id == cheapest.id and run.value.size_in_gb == size
    assert f"with {cheapest.display_name}, the cheapest of" in run.out


def test_create_picks_the_cheapest_provider_where_several_sell_volumes(magic: Magic,
                                                                      cloud: GPUCloud) -> None:
    _, _, crowded = _regions(cloud)
    here = [o for o in cloud.volumes.offers() if crowded in o.regions]
    assert len(here) > 1
    cheapest = min(here, key=lambda o: o.price_per_gb_per_hour)
    run = magic(f"volumes create cheap --size 100 --region {crowded}")
    assert isinstance(run.value, Volume)
    assert run.value.cloud_provider.id == cheapest.cloud_provider.id
    assert f"with {cheapest.cloud_provider.display_name}, the cheapest of {len(here)}" in run.out
    assert "--provider" in run.out
    # Prices read as money ($0.00009/GB/h), never as 9e-05.
    offers = cloud.volumes.offers()
    tiny = next(r for r in sorted({r for o in offers for r in o.regions})
                if len([o for o in offers if r in o.regions]) > 1
                and min(o.price_per_gb_per_hour for o in offers if r in o.regions) < 1e-4)
    least = min((o for o in offers if tiny in o.regions), key=lambda o: o.price_per_gb_per_hour)
    priced = magic(f"volumes create tiny-price --size {max(least.min_size_in_gb, 100):g} "
                   f"--region {tiny}")
    price = f"{least.price_per_gb_per_hour:.10f}".rstrip("0")
    assert f"(${price}/GB/h;" in priced.out and "e-0" not in priced.out
    magics.use(None)
    cloud.volumes.delete(run.value.id)

    chosen = here[0].cloud_provider
    run = magic(f"volumes create data --size 100 --region {crowded} --provider {chosen.id}")
    assert isinstance(run.value, Volume) and run.value.cloud_provider.id == chosen.id
    first_word = chosen.display_name.split()[0].lower()
    run = magic(f"volumes create other --size 100 --region {crowded} --provider {first_word}")
    assert isinstance(run.value, Volume) and run.value.cloud_provider.id == chosen.id

    sentence = _one_sentence(magic(f"volumes create x --size 100 --region {crowded} --provider zz"))
    assert sentence.startswith("No volume provider is called 'zz'; choose one of:")
    sentence = _one_sentence(magic("volumes create x --size 100 --region mars-1"))
    assert sentence.startswith("No provider offers volumes in region 'mars-1'")


def test_create_below_the_minimum_size_is_the_clients_sentence(magic: Magic, cloud: GPUCloud) -> None:
    region, _, _ = _regions(cloud)
    sentence = _one_sentence(magic(f"volumes create tiny --size 0.5 --region {region}"))
    assert sentence.startswith("A volume from") and "GB was asked for" in sentence
    assert cloud.volumes.list() == []


def test_delete_volume_with_yes_asks_nothing(magic: Magic, cloud: GPUCloud,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    region, size, _ = _regions(cloud)
    volume = magic(f"volumes create scratch --size {size} --region {region}").value
    monkeypatch.setattr(builtins, "input", lambda prompt="": pytest.fail("asked"))
    run = magic(f"volumes delete {volume.id} --yes")
    assert run.out == f"Deleted volume scratch ({volume.id}).\n" and run.value is None
    assert cloud.volumes.list() == []


def test_delete_without_a_terminal_cancels_and_suggests_yes(
        magic: Magic, cloud: GPUCloud, monkeypatch: pytest.MonkeyPatch) -> None:
    region, size, _ = _regions(cloud)
    volume = magic(f"volumes create scratch --size {size} --region {region}").value

    def no_stdin(prompt: str = "") -> str:
        raise EOFError

    monkeypatch.setattr(builtins, "input", no_stdin)
    sentence = _one_sentence(magic(f"volumes delete {volume.id}"))
    assert "add --yes" in sentence
    assert len(cloud.volumes.list()) == 1


def test_deleting_an_attached_volume_says_which_instance_holds_it(
        magic: Magic, cloud: GPUCloud, monkeypatch: pytest.MonkeyPatch) -> None:
    volume, instance = _instance_with_volume(cloud, "weights")

    monkeypatch.setattr(builtins, "input", lambda prompt="": pytest.fail("asked"))
    sentence = _one_sentence(magic(f"volumes delete {volume.id} --yes"))
    assert sentence.startswith(f"Volume weights ({volume.id}) is attached to instance "
                               f"trainer ({instance.id}), which is ")
    assert f"%gpucloud delete {instance.id}" in sentence
    assert cloud.volumes.get(volume.id).id == volume.id

    # If the instance list does not show it (a race), the sandbox's 400 is reported the same way.
    monkeypatch.setattr(cloud.instances, "list", lambda deployment_type=None: [])
    sentence = _one_sentence(magic(f"volumes delete {volume.id} --yes"))
    assert f"is attached to instance {instance.id}" in sentence
    assert "the volume was not deleted" in sentence
    assert cloud.volumes.get(volume.id).id == volume.id


def test_names_and_ids_with_spaces(magic: Magic, cloud: GPUCloud) -> None:
    region, size, _ = _regions(cloud)
    run = magic(f"volumes create 'my big   data' --size {size} --region {region}")
    assert run.value.name == "my big   data"
    assert f"Created volume my big   data ({run.value.id})" in run.out
    assert magic(f'volumes get "{run.value.id}"').value.name == "my big   data"
    assert _one_sentence(magic('volumes get "vol 123"')) == "Volume vol 123 not found."


def test_results_are_values_a_cell_can_assign(magic: Magic, cloud: GPUCloud,
                                              shell: InteractiveShell) -> None:
    cloud.volumes.create(name="kept", cloud_provider=cloud.volumes.offers()[0].cloud_provider.id,
                         region=cloud.volumes.offers()[0].regions[0], size_in_gb=100)
    run = magic.cell("df = %gpucloud volumes")
    assert run.err == "" and "Traceback" not in run.out
    df = shell.user_ns["df"]
    assert isinstance(df, pd.DataFrame) and df["name"].tolist() == ["kept"]
    run = magic.cell("%gpucloud volumes")
    assert isinstance(run.value, pd.DataFrame) and "Out[" in run.out  # displayed as the result
    run = magic.cell("v = %gpucloud volumes get {df['_id'][0]}")
    assert shell.user_ns["v"].name == "kept"


# --------------------------------------------------------------------------- offers and instances


def test_offers_shows_available_rows_cheapest_first(magic: Magic, reader: GPUCloud) -> None:
    df = magic("offers").value
    assert isinstance(df, pd.DataFrame) and len(df) > 0
    assert df["available"].all()
    assert df["hourlyPrice"].is_monotonic_increasing
    everything = magic("offers --all").value
    assert len(everything) > len(df) and not everything["available"].all()


@pytest.mark.parametrize(
    ("line", "check"),
    [
        ("--gpu H100", lambda df: df["gpuName"].str.contains("H100").all()),
        ("--gpu h100", lambda df: df["gpuName"].str.contains("H100").all()),
        ("--gpus 8", lambda df: (df["gpuCount"] == 8).all()),
        ("--region eu-north-1", lambda df: (df["region"] == "eu-north-1").all()),
        ("--type container", lambda df: (df["deploymentType"] == "container").all()),
        ("--type baremetal --gpus 8 --all", lambda df: ((df["deploymentType"] == "baremetal")
                                                        & (df["gpuCount"] == 8)).all()),
    ],
)
def test_offers_filters(magic: Magic, reader: GPUCloud, line: str,
                        check: Callable[[pd.DataFrame], bool]) -> None:
    df = magic(f"offers {line}").value
    assert isinstance(df, pd.DataFrame) and len(df) > 0
    assert check(df)
    if "--all" not in line:
        assert df["available"].all()


def test_instances_instance_and_delete(magic: Magic, cloud: GPUCloud,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    assert magic("instances").value.empty
    _, instance = _launch(cloud, name="notebook box")
    df = magic("instances").value
    assert isinstance(df, pd.DataFrame) and df["_id"].tolist() == [instance.id]
    assert magic("instances --type container").value.empty

    details = magic(f"instance {instance.id}").value
    assert isinstance(details, InstanceDetails) and details.name == "notebook box"

    prompts = _answers(monkeypatch, "no")
    run = magic(f"delete {instance.id}")
    assert prompts[0] == (f"Delete instance notebook box ({instance.id})? It has no volume, "
                          "so its data is lost. [y/N] ")
    assert run.out == f"Cancelled: instance notebook box ({instance.id}) was not deleted.\n"
    assert cloud.instances.get(instance.id).status in ("pending", "active")

    _answers(monkeypatch, "y")
    run = magic(f"delete {instance.id}")
    assert run.value is None
    assert run.out == (f"Deleted instance notebook box ({instance.id}); it has no volume, "
                       "so its data is lost.\n")
    assert cloud.instances.get(instance.id).status in ("deleting", "deleted")
    assert _one_sentence(magic(f"delete {instance.id} --yes")).startswith(
        f"Instance notebook box ({instance.id}) is already delet")
    assert _one_sentence(magic("instance nope")) == (
        "Instance nope not found: no instance has that id or name.")


def test_names_work_where_ids_do(magic: Magic, cloud: GPUCloud,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    _, box = _launch(cloud, name="magic-box")
    assert magic("instance magic-box").value.id == box.id
    _, twin = _launch(cloud, name="twin")
    _, other = _launch(cloud, name="twin")
    assert _one_sentence(magic("delete twin --yes")) == (
        f"2 instances are named 'twin' ({twin.id}, {other.id}); give the id of the one you mean.")
    monkeypatch.setattr(builtins, "input", lambda prompt="": pytest.fail("asked"))
    run = magic("delete magic-box --yes")
    assert run.err == "" and run.out.startswith(f"Deleted instance magic-box ({box.id});")
    assert cloud.instances.get(box.id).status in ("deleting", "deleted")
    assert {cloud.instances.get(i.id).status for i in (twin, other)} <= {"pending", "active"}


def test_deleting_an_instance_names_the_volume_that_keeps_its_data(
        magic: Magic, cloud: GPUCloud, monkeypatch: pytest.MonkeyPatch) -> None:
    volume, instance = _instance_with_volume(cloud, "datasets")
    monkeypatch.setattr(builtins, "input", lambda prompt="": pytest.fail("asked"))
    run = magic(f"delete {instance.id} --yes")
    assert run.out == (f"Deleted instance trainer ({instance.id}); volume datasets "
                       f"({volume.id}) keeps its data.\n")
    # Once the instance is being deleted, the volume can go too.
    assert "Deleted volume" in magic(f"volumes delete {volume.id} --yes").out


def test_launch_returns_the_launch_form(magic: Magic, cloud: GPUCloud) -> None:
    from gpucloud_nb.widgets import LaunchForm

    form = magic("launch").value
    assert isinstance(form, LaunchForm)
    assert form.offer.value is None and not form.offer.disabled  # the offers to choose from


def test_launch_with_an_offer_id_prefills_the_form(magic: Magic, cloud: GPUCloud) -> None:
    from gpucloud_nb.widgets import LaunchForm

    offer = cloud.instances.offers(available=True, sort="price")[3]
    run = magic(f"launch {offer.instance_id}")
    assert isinstance(run.value, LaunchForm) and run.err == ""
    assert run.value.offer.value == offer and run.value.offer.disabled
    assert run.value.body is not None and run.value.body["instanceId"] == offer.instance_id
    sentence = _one_sentence(magic("launch no-such-offer"))
    assert sentence == "There is no offer with instanceId 'no-such-offer'; see %gpucloud offers --all."


def test_launch_idle_prefills_delete_when_idle(magic: Magic, cloud: GPUCloud) -> None:
    offer = cloud.instances.offers(available=True, sort="price")[0]
    run = magic(f"launch {offer.instance_id} --idle 30m --delete-after 1h30m")
    assert run.value.idle_delete.value == "30m" and run.err == ""
    assert run.value.auto_delete.value == "1h30m"
    # A client of the cloud directly: nothing would keep the timer, and the preview says so.
    assert "Auto-delete needs a gateway to keep it" in run.value.cost.value
    assert "Delete when idle" in run.value.idle_delete.description
    sentence = _one_sentence(magic("launch --idle 30"))
    assert "needs a unit: '30' could be minutes or seconds; write e.g. 30m or 90s." in sentence
    for bad in ("0s", "soon", "1m1h"):
        for option in ("--idle", "--delete-after"):
            sentence = _one_sentence(magic(f"launch {option} {bad}"))
            assert repr(bad) in sentence and ("1h30m" in sentence or "30 days" in sentence)


def test_chat_returns_a_chat_widget(magic: Magic, cloud: GPUCloud, sandbox_box: Any,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from gpucloud_nb.widgets.chat import ChatWidget

    cloud.sandbox = sandbox_box  # as connect() does for the sandbox
    assert isinstance(magic("chat").value, ChatWidget)

    asked: list[str] = []
    monkeypatch.setattr(getpass, "getpass", lambda prompt="": asked.append(prompt) or INFERENCE_SECRET)
    widget = magic(f"chat {sandbox_box.inference_url}").value
    assert isinstance(widget, ChatWidget)
    assert asked == [f"Inference secret for {sandbox_box.inference_url} (hidden): "]

    monkeypatch.setattr(getpass, "getpass", lambda prompt="": "")
    assert _one_sentence(magic(f"chat {sandbox_box.inference_url}")) == \
        "No secret was given; the chat was not opened."
    assert _one_sentence(magic("chat localhost:8000")).startswith(
        "The endpoint must be a URL starting with http:// or https://")


def test_chat_without_an_endpoint_on_the_real_cloud_asks_for_one(magic: Magic, cloud: GPUCloud) -> None:
    sentence = _one_sentence(magic("chat"))
    assert sentence.startswith("On the real cloud, give the inference instance's URL")


def test_spend_returns_the_clients_frame(magic: Magic, cloud: GPUCloud,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    frame = pd.DataFrame({"name": ["a"], "spend": [0.5]})
    monkeypatch.setattr(GPUCloud, "spend", lambda self, include_deleted=False: frame, raising=False)
    assert magic("spend").value is frame


def test_spend_against_the_sandbox(magic: Magic, cloud: GPUCloud) -> None:
    _, instance = _launch(cloud)
    spend = magic("spend").value
    assert isinstance(spend, pd.DataFrame) and spend["_id"].tolist() == [instance.id]


def test_spend_and_instances_are_shown_for_reading(magic: Magic, cloud: GPUCloud) -> None:
    _, kept = _launch(cloud, name="kept")
    _, gone = _launch(cloud, name="gone")
    cloud.instances.delete(gone.id)
    wait_for(lambda: cloud.instances.get(gone.id).status == "deleted")
    spend = magic("spend").value
    assert set(spend["_id"]) == {kept.id, gone.id}  # the frame keeps every row, raw
    shown = repr(spend).splitlines()
    assert shown[0].split()[0] == "name" and shown[0].split()[-1] == "_id"
    assert shown[-1].lstrip().startswith("Total (1 deleted not shown) ")
    assert "gone" not in [line.split()[0] for line in shown]
    shown_all = repr(magic("spend --all").value).splitlines()
    assert "gone" in [line.split()[0] for line in shown_all]
    assert shown_all[-1].split()[0] == "Total"
    listed = magic.cell("%gpucloud instances")
    header = next(line for line in listed.out.splitlines() if "status" in line)
    assert header.split()[0] == "name" and header.split()[-1] == "_id"
    assert "gone" not in listed.out and "kept" in listed.out


# --------------------------------------------------------------------------- connect


def test_first_use_connects_to_the_sandbox_without_a_key(magic: Magic,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    import gpucloud_nb._connect as connecting

    monkeypatch.delenv("GPUCLOUD_API_KEY", raising=False)
    magics.use(None)
    run = magic("volumes offers")
    assert isinstance(run.value, pd.DataFrame) and "gpucloud-nb: SANDBOX" in run.out
    assert magics.current_cloud().is_sandbox
    # Short lines, broken at spaces: JupyterLab would break a long one mid-word.
    banner = run.out[run.out.index("gpucloud-nb: SANDBOX"):].splitlines()[:3]
    assert magics.current_cloud().sandbox.management_url in banner[1]
    assert magics.current_cloud().base_url in banner[2]  # its personal gateway, in front
    assert all(len(line) <= 88 for line in banner), banner
    # Once per kernel: neither the next magic nor another connect() repeats it.
    magics.use(None)
    assert "SANDBOX" not in magic("volumes offers").out
    with connecting.connect() as again:
        assert again.is_sandbox
    assert magic("volumes").err == "" and "SANDBOX" not in magic("volumes").out


def test_connect_without_options_and_without_a_key_is_the_sandbox(
        magic: Magic, cloud: GPUCloud, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUCLOUD_API_KEY", raising=False)
    run = magic("connect")
    assert run.value is None and "SANDBOX" in run.out
    assert magics.current_cloud().is_sandbox


def test_connect_refuses_a_base_url_that_is_not_http(magic: Magic, no_cloud: None) -> None:
    assert _one_sentence(magic("connect --base-url ftp://example.org")) == \
        "The base URL must start with http:// or https://, not 'ftp://example.org'."


def test_connect_sandbox(magic: Magic, cloud: GPUCloud) -> None:
    run = magic("connect --sandbox")
    assert run.value is None and "SANDBOX" in run.out and run.err == ""
    assert magics.current_cloud().is_sandbox and magics.current_cloud() is not cloud


def test_connect_base_url_asks_for_the_key_with_getpass(
        magic: Magic, sandbox_box: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUCLOUD_API_KEY", raising=False)
    asked: list[str] = []
    monkeypatch.setattr(getpass, "getpass", lambda prompt="": asked.append(prompt) or API_KEY)
    run = magic(f"connect --base-url {sandbox_box.management_url}")
    assert run.value is None and run.err == ""
    assert run.out == (f"Connected to the GPU cloud at {sandbox_box.management_url} "
                       "with key sk-…6789.\n")
    assert asked == [f"API key for {sandbox_box.management_url} (hidden): "]
    connected = magics.current_cloud()
    assert connected.base_url == sandbox_box.management_url and not connected.is_sandbox
    assert isinstance(magic("volumes").value, pd.DataFrame)


def test_connect_base_url_takes_the_key_from_the_environment(
        magic: Magic, sandbox_box: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUCLOUD_API_KEY", API_KEY)
    monkeypatch.setattr(getpass, "getpass", lambda prompt="": pytest.fail("asked"))
    run = magic(f"connect --base-url {sandbox_box.management_url}")
    assert run.out.startswith("Connected to the GPU cloud")


def test_connect_with_a_wrong_key_keeps_the_previous_cloud(
        magic: Magic, cloud: GPUCloud, sandbox_box: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUCLOUD_API_KEY", raising=False)
    monkeypatch.setattr(getpass, "getpass", lambda prompt="": "sk-wrong-key-00000000000")
    sentence = _one_sentence(magic(f"connect --base-url {sandbox_box.management_url}"))
    assert sentence.endswith("The session's cloud is unchanged.")
    assert magics.current_cloud() is cloud
    monkeypatch.setattr(getpass, "getpass", lambda prompt="": "")
    assert _one_sentence(magic(f"connect --base-url {sandbox_box.management_url}")) == \
        "No API key was given; the session's cloud is unchanged."


# --------------------------------------------------------------------------- user errors


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("volumz", "%gpucloud: unknown subcommand 'volumz'; try %gpucloud --help"),
        ("volumes lst", "%gpucloud volumes: unknown subcommand 'lst'; try %gpucloud volumes --help"),
        ("volumes create", "%gpucloud volumes create: the following arguments are required: "
                           "NAME, --size, --region; try %gpucloud volumes create --help"),
        ("volumes create data --region us-east-1", "%gpucloud volumes create: the following "
         "arguments are required: --size; try %gpucloud volumes create --help"),
        ("volumes create data --size big --region us-east-1", "%gpucloud volumes create: argument "
         "--size: 'big' is not a number of GB; try %gpucloud volumes create --help"),
        ("volumes create data --size -5 --region us-east-1", "%gpucloud volumes create: argument "
         "--size: '-5' is not a positive number of GB; try %gpucloud volumes create --help"),
        ("volumes get", "%gpucloud volumes get: the following arguments are required: ID; "
                        "try %gpucloud volumes get --help"),
        ("volumes get a b", "%gpucloud volumes get: unrecognized arguments: b; "
                            "try %gpucloud volumes get --help"),
        ("offers --type gpu", "%gpucloud offers: argument --type: invalid choice: 'gpu' (choose "
                              "from 'vm', 'container', 'baremetal'); try %gpucloud offers --help"),
        ("offers --gpus two", "%gpucloud offers: argument --gpus: 'two' is not a whole number of "
                              "GPUs; try %gpucloud offers --help"),
        ("instance", "%gpucloud instance: the following arguments are required: INSTANCE; "
                     "try %gpucloud instance --help"),
        ("delete", "%gpucloud delete: the following arguments are required: INSTANCE; "
                   "try %gpucloud delete --help"),
        ("connect --sandbox --base-url http://x", "%gpucloud connect: argument --base-url: not "
         "allowed with argument --sandbox; try %gpucloud connect --help"),
        ("--yes", "%gpucloud: unrecognized arguments: --yes; try %gpucloud --help"),
        ("volumes create 'my data --size 1", "%gpucloud: No closing quotation in the arguments; "
                                             "check the quotes"),
    ],
)
def test_usage_errors_are_one_line(magic: Magic, no_cloud: None, line: str, expected: str) -> None:
    assert _one_sentence(magic(line)) == expected


@pytest.mark.parametrize("line", [
    f"connect --api-key {API_KEY}",
    f"connect --base-url http://127.0.0.1:1 --api-key={API_KEY}",
    f"volumes --key {API_KEY}",
])
def test_a_key_in_the_cell_is_refused_with_the_reason(magic: Magic, cloud: GPUCloud,
                                                      line: str) -> None:
    sentence = _one_sentence(magic(line))
    assert "is refused: a key typed into a cell is saved in the notebook" in sentence
    assert "GPUCLOUD_API_KEY" in sentence
    assert magics.current_cloud() is cloud


@pytest.mark.parametrize("line", [f"chat http://127.0.0.1:1 --secret {INFERENCE_SECRET}",
                                  f"chat --inference-secret={INFERENCE_SECRET}"])
def test_a_secret_in_the_cell_is_refused_with_the_reason(magic: Magic, no_cloud: None,
                                                         line: str) -> None:
    sentence = _one_sentence(magic(line))
    assert "is refused: a secret typed into a cell is saved in the notebook" in sentence
    assert "hidden prompt" in sentence


@pytest.mark.parametrize("line", ["volumz", "volumes create", "offers --type gpu",
                                  "volumes get vol-123", f"connect --api-key {API_KEY}"])
def test_errors_in_a_cell_show_no_traceback(magic: Magic, reader: GPUCloud, line: str) -> None:
    run = magic.cell(f"%gpucloud {line}")
    assert "Traceback" not in run.text and "Error" not in run.out
    assert len(run.err.strip().splitlines()) == 1


def test_an_api_error_is_one_sentence(magic: Magic, reader: GPUCloud) -> None:
    assert _one_sentence(magic("volumes get vol-123")) == "Volume vol-123 not found."
    assert _one_sentence(magic("volumes delete vol-123 --yes")) == "Volume vol-123 not found."
    assert _one_sentence(magic("delete i-123 --yes")) == (
        "Instance i-123 not found: no instance has that id or name.")


def test_a_refused_key_is_one_sentence_without_the_key(magic: Magic, sandbox_box: Any) -> None:
    magics.use(GPUCloud(api_key="sk-bad-key-0000000000000000", base_url=sandbox_box.management_url))
    sentence = _one_sentence(magic("volumes"))
    assert "sk-bad-key-0000000000000000" not in sentence and sentence.endswith(".")


def _strings_in(value: Any, depth: int = 0) -> Iterator[str]:
    """Every string held by ``value`` through containers, a few levels deep."""
    if isinstance(value, str):
        yield value
    elif depth < 4 and isinstance(value, dict):
        for key, item in value.items():
            yield from _strings_in(key, depth + 1)
            yield from _strings_in(item, depth + 1)
    elif depth < 4 and isinstance(value, list | tuple | set | frozenset):
        for item in value:
            yield from _strings_in(item, depth + 1)


def test_the_magics_module_keeps_no_secret_once_the_client_is_gone(
        magic: Magic, sandbox_box: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    cloud = GPUCloud(api_key=API_KEY, base_url=sandbox_box.management_url)
    cloud.sandbox = sandbox_box  # as connect() does: the sandbox's secrets are the client's
    magics.use(cloud)
    assert "SECRET" not in magic("volumes list").text
    monkeypatch.setattr(getpass, "getpass", lambda prompt="": INFERENCE_SECRET)
    magic(f"chat {sandbox_box.inference_url}").value.close()
    magics.use(None)
    cloud.close()
    held = [text for value in vars(magics).values() for text in _strings_in(value)]
    assert not [text for text in held if any(secret in text for secret in SECRETS)]


def test_the_magics_keep_no_secret_in_module_state(magic: Magic, monkeypatch: pytest.MonkeyPatch,
                                                    shared_box: Any) -> None:
    """Secrets are masked with what the current client holds; nothing is collected globally."""
    monkeypatch.setattr(getpass, "getpass", lambda prompt="": "sk-infer-SECRET-9876543210")
    magic("volumes")
    magic(f"chat {shared_box.inference_url}")
    magics.use(None)
    for name, value in vars(magics).items():
        if isinstance(value, set | list | tuple | dict) and not name.isupper():
            assert not any(secret in repr(value) for secret in SECRETS), name


# --------------------------------------------------------------------------- over SSH


@pytest.fixture
def ssh_cloud(cloud: GPUCloud, sandbox_box: Any, tmp_path: Any,
              monkeypatch: pytest.MonkeyPatch) -> GPUCloud:
    """The ``cloud`` fixture, knowing its sandbox (for the SSH key), with an empty ~/.ssh."""
    monkeypatch.setenv("HOME", str(tmp_path))
    cloud.sandbox = sandbox_box
    return cloud


def test_cell_run_streams_output_and_a_failure_is_one_line(magic: Magic,
                                                           ssh_cloud: GPUCloud) -> None:
    details = launch_active(ssh_cloud, "box-1")
    ran = magic.cell("%%gpucloud run box-1\nnvidia-smi | grep NVIDIA-SMI\necho done in $PWD")
    assert "NVIDIA-SMI" in ran.out and "done in " in ran.out and details.id in ran.out
    assert ran.err == "" and "Traceback" not in ran.text
    failed = magic.cell(f"%%gpucloud run {details.id}\necho partial\nexit 4")
    assert "partial" in failed.out
    assert failed.err == "The cell exited with status 4 on box-1.\n"
    python = magic.cell("%%gpucloud run box-1 --python\nprint(sum(range(10)))")
    assert python.out.strip() == "45"
    missing = magic.cell("%%gpucloud run box-1\nno-such-tool")
    assert missing.err.count("\n") == 1 and "not found on box-1 (exit status 127)" in missing.err


def test_cell_run_on_several_nodes_gives_each_its_rank(magic: Magic, ssh_cloud: GPUCloud) -> None:
    first, second = launch_active(ssh_cloud, "node-a"), launch_active(ssh_cloud, "node-b")
    ran = magic.cell("%%gpucloud run --nodes node-a,node-b\n"
                     'echo "rank $GPUCLOUD_NODE_RANK of $GPUCLOUD_NUM_NODES on $GPUCLOUD_INSTANCE_ID '
                     'master $MASTER_ADDR:$MASTER_PORT"')
    assert ran.err == ""
    assert sorted(ran.out.splitlines()) == [
        f"[0] rank 0 of 2 on {first.id} master 127.0.0.1:29500",
        f"[1] rank 1 of 2 on {second.id} master 127.0.0.1:29500"]
    failed = magic.cell('%%gpucloud run --nodes node-a,node-b\nexit "$GPUCLOUD_NODE_RANK"')
    assert failed.err == "The cell exited with status 1 on node 1 (node-b).\n"
    assert magic.cell("%%gpucloud run node-a --nodes node-a\ntrue").err.startswith(
        "Usage: %%gpucloud run INSTANCE [--python] [--timeout S], or %%gpucloud run --nodes")
    assert magic.cell("%%gpucloud run --nodes node-a,,node-b\ntrue").err == (
        "--nodes takes instance names or ids separated by commas, e.g. --nodes train-0,train-1; "
        "'node-a,,node-b' was given.\n")


def test_interrupting_a_cell_stops_the_remote_process(magic: Magic, ssh_cloud: GPUCloud) -> None:
    import _thread
    import os
    import threading
    import time

    launch_active(ssh_cloud, "box-2")
    timer = threading.Timer(2.0, _thread.interrupt_main)
    timer.start()
    ran = magic.cell("%%gpucloud run box-2\necho pid $$\nsleep 60\necho never")
    timer.cancel()
    assert "Interrupted" in ran.err and "never" not in ran.out and "Traceback" not in ran.text
    pid = int(ran.out.split("pid ")[1].split()[0])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.killpg(pid, 0)  # the sandbox instance is this machine: its pids are ours
        except ProcessLookupError:
            return
        time.sleep(0.05)
    pytest.fail("the remote process is still running after the interrupt")


def test_put_and_get_copy_files_and_bad_targets_are_one_line(magic: Magic, ssh_cloud: GPUCloud,
                                                             tmp_path: Any) -> None:
    launch_active(ssh_cloud, "box-3")
    local = tmp_path / "notes.txt"
    local.write_text("hello instance\n")
    put = magic(f"put {local} box-3:notes.txt")
    assert put.err == "" and "Copied" in put.out
    back = tmp_path / "back.txt"
    got = magic(f"get box-3:notes.txt {back}")
    assert got.err == "" and back.read_text() == "hello instance\n"
    assert magic(f"get nobody:notes.txt {back}").err == (
        "Instance nobody not found: no instance has that id or name.\n")
    assert magic(f"put {local} box-3").err.startswith("%gpucloud put: write the remote side")
    assert "does not exist on instance" in magic(f"get box-3:absent.txt {tmp_path / 'a'}").err
    assert magic("run box-3").err.startswith("%gpucloud run runs a cell")


def test_get_refuses_to_overwrite_a_local_file_without_force(magic: Magic, ssh_cloud: GPUCloud,
                                                              tmp_path: Any) -> None:
    details = launch_active(ssh_cloud, "box-5")
    ssh_cloud.instances.run(details.id, "echo theirs > r.txt")
    mine = tmp_path / "r.txt"
    mine.write_text("mine\n")
    refused = magic(f"get box-5:r.txt {mine}")
    assert refused.out == "" and refused.err == (
        f"{str(mine)!r} already exists; pass overwrite=True (--force in %gpucloud get) "
        "to replace it.\n")
    assert mine.read_text() == "mine\n"
    forced = magic(f"get box-5:r.txt {mine} --force")
    assert forced.err == "" and mine.read_text() == "theirs\n"


def test_cell_run_timeout_stops_the_process_with_one_line(magic: Magic,
                                                          ssh_cloud: GPUCloud) -> None:
    import _thread
    import os
    import threading
    import time

    details = launch_active(ssh_cloud, "box-6")
    ssh_cloud.instances.run(details.id, "true")
    watchdog = threading.Timer(20.0, _thread.interrupt_main)  # the old code never returned
    watchdog.start()
    started = time.monotonic()
    ran = magic.cell("%%gpucloud run box-6 --timeout 2\necho pid $$\nsleep 60")
    elapsed = time.monotonic() - started
    watchdog.cancel()
    assert ran.err == (f"The command on instance {details.id} did not finish within 2 s "
                       "and was stopped.\n"), ran.err
    assert elapsed < 2 + 2 + 1  # one more second for the name lookup
    pid = int(ran.out.split("pid ")[1].split()[0])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    pytest.fail("the remote sleep is still running after the timeout")


def test_cell_run_shows_a_flood_at_a_bounded_rate_and_keeps_the_result(
        magic: Magic, ssh_cloud: GPUCloud, shell: InteractiveShell,
        monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    from gpucloud_nb import magics_remote

    monkeypatch.setattr(magics_remote, "LINES_PER_SECOND", 50)
    launch_active(ssh_cloud, "box-7")
    started = time.monotonic()
    ran = magic.cell("%%gpucloud run box-7\nyes | head -n 200000")
    seconds = time.monotonic() - started
    lines = ran.out.splitlines()
    shown = [line for line in lines if line == "y"]
    assert len(shown) <= 50 * (seconds + 1)
    assert lines[-1] == (f"… {200000 - len(shown):,} lines not shown; the last 10 MiB of each "
                         "stream is in _gpucloud_run.stdout and .stderr.")
    assert len(lines) == len(shown) + 1 and ran.err == ""
    assert shell.user_ns["_gpucloud_run"].stdout == "y\n" * 200000


def test_cell_run_strips_terminal_controls_and_escapes_binary(magic: Magic,
                                                              ssh_cloud: GPUCloud) -> None:
    launch_active(ssh_cloud, "box-8")
    ran = magic.cell("%%gpucloud run box-8\n"
                     "printf '\\033]0;owned\\007\\033]52;c;ZXZpbA==\\007\\033[31mred\\033[0m\\n'\n"
                     "printf '\\033[2J\\033[10;1Hmoved \\001 bell\\007 \\377 end\\n'\n"
                     "printf '10%%\\r100%%\\n'")
    assert ran.out.splitlines() == ["red", "moved \\x01 bell\\x07 \\xff end", "100%"]
    long = magic.cell("%%gpucloud run box-8\nhead -c 5000 /dev/zero | tr '\\0' x")
    assert long.out == "x" * 2000 + " … (3,000 more characters)\n"
    assert "\x1b" not in ran.text and ran.err == ""


# hostile or odd input ------------------------------------------------------------------------


@pytest.mark.parametrize(("line", "expected"), [
    ("volumes create data --size 1_000 --region us-east-1",
     "%gpucloud volumes create: argument --size: '1_000' is not a number of GB; "
     "try %gpucloud volumes create --help"),
    ("volumes create data --size ١٠٠ --region us-east-1",
     "%gpucloud volumes create: argument --size: '١٠٠' is not a number of GB; "
     "try %gpucloud volumes create --help"),
    ("volumes create data --size nan --region us-east-1",
     "%gpucloud volumes create: argument --size: 'nan' is not a number of GB; "
     "try %gpucloud volumes create --help"),
    ("offers --gpus ٨", "%gpucloud offers: argument --gpus: '٨' is not a whole number of GPUs; "
                        "try %gpucloud offers --help"),
    ("offers --gpus 1_0", "%gpucloud offers: argument --gpus: '1_0' is not a whole number of "
                          "GPUs; try %gpucloud offers --help"),
])  # fmt: skip
def test_numbers_are_plain_ascii_digits(magic: Magic, no_cloud: None, line: str,
                                        expected: str) -> None:
    assert _one_sentence(magic(line)) == expected


@pytest.mark.parametrize(("line", "shown"), [
    ("offers --token=tok-0123456789abcdef", "unrecognized arguments: --token=…;"),
    ("offers --token tok-0123456789abcdef", "unrecognized arguments: --token …;"),
    ("volumes list --Pass=tok-0123456789abcdef extra", "unrecognized arguments: --Pass=… extra;"),
    ("tok-0123456789abcdef-long-pasted-key", "unknown subcommand 'tok-0123…'"),
])  # fmt: skip
def test_unknown_options_are_not_echoed(magic: Magic, no_cloud: None, line: str,
                                        shown: str) -> None:
    sentence = _one_sentence(magic(line))
    assert shown in sentence and "0123456789abcdef" not in sentence


@pytest.mark.parametrize("line", [f"connect --API-KEY={API_KEY}", f"volumes --Api_Key {API_KEY}"])
def test_a_key_option_in_any_case_is_refused(magic: Magic, no_cloud: None, line: str) -> None:
    sentence = _one_sentence(magic(line))
    assert "is refused: a key typed into a cell" in sentence and API_KEY not in sentence


def test_names_with_bidi_or_control_characters_print_escaped(
        magic: Magic, cloud: GPUCloud, monkeypatch: pytest.MonkeyPatch) -> None:
    region, size, _ = _regions(cloud)
    name = "invoice\u202etxt.exe\x1b[2J"
    run = magic(f"volumes create '{name}' --size {size} --region {region}")
    assert run.value.name == name  # the name itself is kept as given
    assert "invoice\\u202etxt.exe\\x1b[2J" in run.out
    assert "\u202e" not in run.out and "\x1b" not in run.out
    prompts = _answers(monkeypatch, "n")
    run = magic(f"volumes delete {run.value.id}")
    assert "\u202e" not in prompts[0] and "\\u202e" in prompts[0]
    assert "\u202e" not in run.out and "\\u202e" in run.out
    assert _one_sentence(magic("volumes get 'a\u2066b'")) == "Volume a\\u2066b not found."


def test_launch_asks_for_a_provider_when_two_sell_the_id(magic: Magic, sandbox_factory) -> None:
    from samples import same_id_two_providers

    box = sandbox_factory(offers=same_id_two_providers(), api_key=API_KEY)
    with GPUCloud(api_key=API_KEY, base_url=box.management_url) as cloud:
        magics.use(cloud)
        sentence = _one_sentence(magic("launch gpu-1x"))
        assert sentence.startswith("Offer 'gpu-1x' is sold by 2 providers: Cheap Cloud")
        assert sentence.endswith("choose one with --provider ID.")
        form = magic("launch gpu-1x --provider 'Cheap Cloud'").value
        assert (form.offer.value.cloud.name, form.offer.value.hourly_price) == ("Cheap Cloud", 1.0)
        form = magic("launch gpu-1x --provider fedcba9876543210fedcba98").value
        assert form.offer.value.hourly_price == 50.0
        assert "sells no offer" in _one_sentence(magic("launch gpu-1x --provider nobody"))
        assert "--provider needs an OFFER_ID" in _one_sentence(magic("launch --provider x"))
        magics.use(None)


def test_launch_with_a_budget_prefills_the_forms_budget_and_the_launch_keeps_it(
        magic: Magic, cloud: GPUCloud, sandbox_box: Any, gateway_factory: Any) -> None:
    offer = cloud.instances.offers(available=True, deployment_type="vm", sort="price")[0]
    cloud.sandbox = sandbox_box  # the sandbox itself keeps no budget
    form = magic(f"launch {offer.instance_id} --budget 5").value
    assert form.budget.value == 5.0
    # The sandbox itself, no gateway: nobody would keep it, so the form says the launch is refused.
    assert "A budget needs a gateway to keep it" in form.cost.value
    cloud = GPUCloud(api_key=ADA, base_url=gateway_factory(PERSONAL, upstream=sandbox_box).url)
    cloud.sandbox = sandbox_box  # as connect() makes it: its gateway keeps it
    magics.use(cloud)
    form = magic(f"launch {offer.instance_id} --budget 5").value
    assert "Deleted once it has cost $5.00" in form.cost.value
    assert "by the gateway, even if this kernel stops" in form.cost.value
    details = form.fill(name="budgeted").launch().result(timeout=60)
    try:
        assert cloud.budgets.states()[details.id].dollars == 5.0
    finally:
        assert cloud.budgets.cancel(details.id)
    for bad in ("nan", "-1", "0", "five"):
        sentence = _one_sentence(magic(f"launch {offer.instance_id} --budget {bad}"))
        assert sentence == (f"%gpucloud launch: argument --budget: {bad!r} is not a positive "
                            "number of dollars; try %gpucloud launch --help")


def test_kernel_installs_the_instance_kernelspec_and_says_how_to_switch(
        magic: Magic, ssh_cloud: GPUCloud, tmp_path: Any, monkeypatch: pytest.MonkeyPatch,
        kernel_provisioner_entry_point: Any) -> None:
    import json

    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "jupyter"))
    instance = launch_active(ssh_cloud, "kernel box")
    run = magic("kernel 'kernel box' --delete-on-shutdown")
    assert run.value == "gpucloud-kernel-box"
    assert run.out == (
        "Installed kernel gpucloud-kernel-box: choose Kernel → Change Kernel → “Python 3 on "
        f"kernel box · {instance.gpu_model} × {instance.gpu_count}” to run this notebook on the "
        "instance. When that kernel shuts down, the instance is deleted.\n")
    spec = json.loads((tmp_path / "jupyter" / "kernels" / "gpucloud-kernel-box" /
                       "kernel.json").read_text())
    assert spec["metadata"]["kernel_provisioner"]["config"]["on_shutdown"] == "delete"
    assert _one_sentence(magic("kernel nope")) == (
        "Instance nope not found: no instance has that id or name.")
