"""``LaunchForm``: fill in, check and launch one GPU instance, then watch it become active.

    >>> form = LaunchForm(cloud, offer)             # or LaunchForm(cloud): pick from a dropdown
    >>> form.fill(name="train-1", os="ubuntu-22.04", ssh_key=open("id.pub").read())
    >>> form.problem                                 # None, or why Launch is disabled
    >>> details = form.launch().result(timeout=600)  # a concurrent.futures.Future
    >>> details.ssh_command
    'ssh -p 40122 ubuntu@127.0.0.1'

Choices, written down once:

- The form never sends what it can tell is wrong: the Launch button stays disabled while
  :attr:`LaunchForm.problem` holds a sentence: the form's own checks first ("Give the instance a
  name."), then :func:`gpucloud_nb.rules.instance_create_problem` (region, OS image, cloud-init,
  volume), then the client's ``max_hourly_cost`` cap.
- ``fill()`` accepts values the dropdowns do not offer (a region where the offer is sold out, an
  OS image it does not list, an unknown volume id): they are added, marked, and the form says
  why it cannot launch them, exactly as it would when the value comes from a person.
- The cloud-init script is sent base64-encoded as the spec's ``vm.base64CloudInitScript``; text
  given to ``fill(cloud_init=...)`` is the script itself (a :class:`pathlib.Path` is read). An
  uploaded file must be UTF-8 text. Container offers take no cloud-init script.
- Giving both an SSH public key and a key id is refused (the spec does not say which would win).
- The launch runs in a daemon thread; progress follows ``wait_until_active(on_progress=...)``,
  polling at most every ``MAX_POLL_SECONDS`` (2 s). ``close()`` stops waiting as "Stop waiting"
  does, and so does dropping the form (the thread holds it through a weak reference).
  The progress bar is scaled to the expected launch time: the sandbox's ``launch_seconds``, else
  the spec's "about 5 minutes". "Stop waiting" resolves the future at once with
  :class:`~gpucloud_nb.widgets._common.WaitStopped`; the instance keeps launching on the cloud.
- The cost preview counts the hourly price of pending and active instances (a list call at
  construction and after each launch, only when the client has ``max_hourly_cost``).
"""

from __future__ import annotations

import base64
import contextlib
import os
import threading
import weakref
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import ipywidgets as widgets

from gpucloud_nb import rules
from gpucloud_nb.client import costcap
from gpucloud_nb.errors import InvalidInputError
from gpucloud_nb.models import Instance, InstanceDetails, InstanceOffer, Volume, VolumeOffer
from gpucloud_nb.widgets._common import (
    STYLE,
    StatusLine,
    WaitStopped,
    choose,
    duration,
    escape,
    guarded,
    join_nonempty,
    log,
    money,
    per_day,
    per_hour,
    set_options,
    settle,
    show,
)

__all__ = ["LaunchForm", "find_offer", "offer_label"]

#: The spec: "about 5 minutes to launch for a VM with a model-serving image".
DEFAULT_EXPECTED_LAUNCH_SECONDS = 300.0
_WIDE = widgets.Layout(width="42em")
_MEDIUM = widgets.Layout(width="28em")
#: The longest wait between two polls of a launching instance: Stop and close() end the
#: launch thread within this time.
MAX_POLL_SECONDS = 2.0
_FILL_KEYS = ("offer", "name", "region", "os", "image", "cloud_init", "volume_id", "ssh_key",
              "ssh_key_id", "auto_delete_minutes")


class _StopSignal(Exception):
    """Raised inside on_progress to leave wait_until_active after the user stopped waiting."""


def _launch_thread(ref: weakref.ref[LaunchForm], cloud: Any, body: dict[str, Any],
                   delete_after: float | None, future: Future[InstanceDetails],
                   stop: threading.Event) -> None:
    """The launch thread: whatever happens, the Future settles and the form goes idle.

    It holds the form only through ``ref`` (and only while drawing), so a form dropped while it
    waits is garbage-collected, which sets ``stop`` and ends the wait.
    """
    gone = WaitStopped("Stopped waiting: the launch form is gone; the instance keeps launching "
                       "and is billed once active: check InstancesPanel.")
    try:
        details = _launch_and_wait(ref, cloud, body, delete_after, stop)
    except _StopSignal:
        if ref() is None:
            settle(future, error=gone)
        return
    except BaseException as error:
        form = ref()
        if form is None:
            settle(future, error=error)
        elif not stop.is_set():
            form._failed(error)
            settle(future, error=error)
            form._refresh_used_hourly()
        return
    form = ref()
    if form is None:
        if details is None:
            settle(future, error=gone)
        else:
            settle(future, details)
        return
    if stop.is_set() or details is None:
        return
    try:
        form._succeeded(details)
    except Exception as error:  # drawing the result failed; the instance is active anyway
        form.status.error(error)
    finally:
        form._finish()
        settle(future, details)


def _launch_and_wait(ref: weakref.ref[LaunchForm], cloud: Any, body: dict[str, Any],
                     delete_after: float | None, stop: threading.Event) -> InstanceDetails | None:
    name = body["name"]
    instance = cloud.instances.create(
        name=name, cloud_provider=body["cloudProvider"], instance_id=body["instanceId"],
        region=body["region"], volume_id=body.get("volumeId"), vm=body.get("vm"),
        docker_container=body.get("dockerContainer"), ssh_key_id=body.get("sshKeyId"),
        ssh_key=body.get("sshKey"), delete_after=delete_after)
    form = ref()
    if form is None or stop.is_set():
        return None
    form.instance = instance
    form.status.info(f"Launched {name} (id {instance.id}); waiting for it to become active…")
    form._refresh_used_hourly()
    form._waited = 0.0
    expected, timeout = form.expected_launch_seconds, form.timeout
    del form  # from here on the thread holds the form only while drawing progress

    def on_progress(details: InstanceDetails, elapsed: float) -> None:
        form = ref()
        if form is None or stop.is_set():
            raise _StopSignal
        form.instance = details
        form._waited = elapsed
        if details.status == "pending":
            form.progress.value = min(elapsed / expected, 0.95)
        form.elapsed.value = escape(f"{details.status}… {duration(elapsed)}")

    return cloud.instances.wait_until_active(instance.id, timeout=timeout, on_progress=on_progress,
                                             max_poll_interval=MAX_POLL_SECONDS)


def offer_label(offer: InstanceOffer) -> str:
    """One line for a dropdown: GPU × count · type · provider · price (instanceId)."""
    return (f"{offer.gpu_name} ×{offer.gpu_count} · {offer.deployment_type} · {offer.cloud.name} · "
            f"{per_hour(offer.hourly_price)} ({offer.instance_id})")


def find_offer(offers: Sequence[InstanceOffer], instance_id: str, provider: str | None = None,
               *, choose: str = "provider=") -> InstanceOffer:
    """The offer with this ``instanceId``, sold by ``provider`` (its ``_id`` or name) when given.

    Two providers may sell offers with the same ``instanceId``, so an id alone is enough only
    when one provider sells it; otherwise one sentence lists the sellers and asks for ``choose``
    (``provider=`` in Python, ``--provider`` in the magic).

        >>> find_offer(cloud.instances.offers(), "h100-1x", provider="Cheap Cloud")
    """
    same = [o for o in offers if o.instance_id == instance_id]
    if not same:
        raise InvalidInputError(f"There is no offer with instanceId '{instance_id}'.")

    def sellers(among: Sequence[InstanceOffer]) -> str:
        return ", ".join(f"{o.cloud.name} ({o.cloud.id}) at {per_hour(o.hourly_price) or 'no price'}"
                         for o in among)

    if provider is not None:
        wanted = provider.casefold()
        match = [o for o in same if wanted in (o.cloud.id.casefold(), o.cloud.name.casefold())]
        if len(match) == 1:
            return match[0]
        if not match:
            raise InvalidInputError(f"Provider '{provider}' sells no offer '{instance_id}'; "
                                    f"it is sold by: {sellers(same)}.")
        same = match
    if len(same) > 1:
        raise InvalidInputError(f"Offer '{instance_id}' is sold by {len(same)} providers: "
                                f"{sellers(same)}; choose one with {choose}.")
    return same[0]


def _offer_json(offer: InstanceOffer) -> dict[str, Any]:
    """The wire JSON of an offer, rebuilt when the record was made by hand (no ``raw``)."""
    if offer.raw:
        return offer.raw
    config = offer.configuration
    return {
        "gpuName": offer.gpu_name, "gpuCount": offer.gpu_count, "nvlink": offer.nvlink,
        "deploymentType": offer.deployment_type, "instanceId": offer.instance_id,
        "cloudInitAvailable": offer.cloud_init_available,
        "cloud": {"_id": offer.cloud.id, "name": offer.cloud.name},
        "configuration": {"ramGB": config.ram_gb, "storageGB": config.storage_gb,
                          "vCpu": config.vcpu, "vRamGB": config.vram_gb, "os": list(config.os),
                          "interconnect": config.interconnect},
        "hourlyPrice": offer.hourly_price,
        "availability": [{"region": a.region, "name": a.name, "countryCode": a.country_code,
                          "available": a.available} for a in offer.availability],
    }


def _volume_json(volume: Volume) -> dict[str, Any]:
    if volume.raw:
        return volume.raw
    provider = volume.cloud_provider
    return {"_id": volume.id, "name": volume.name, "region": volume.region,
            "sizeInGb": volume.size_in_gb,
            "cloudProvider": None if provider is None else {"_id": provider.id}}


def _volume_offer_json(offer: VolumeOffer) -> dict[str, Any]:
    if offer.raw:
        return offer.raw
    return {"cloudProvider": {"_id": offer.cloud_provider.id,
                              "displayName": offer.cloud_provider.display_name},
            "minSizeInGb": offer.min_size_in_gb, "pricePerGbPerHour": offer.price_per_gb_per_hour_text,
            "regions": list(offer.regions)}


def _as_offer(offer: Any) -> InstanceOffer:
    if isinstance(offer, InstanceOffer):
        return offer
    if isinstance(offer, Mapping):
        return InstanceOffer.from_json(offer)
    raise InvalidInputError(
        f"offer must be an InstanceOffer, its JSON or an instanceId, not {type(offer).__name__}."
    )


def _expected_launch_seconds(cloud: Any) -> float:
    sandbox = getattr(cloud, "sandbox", None)
    seconds = getattr(getattr(sandbox, "config", None), "launch_seconds", None)
    if isinstance(seconds, int | float) and seconds > 0:
        return float(seconds)
    return DEFAULT_EXPECTED_LAUNCH_SECONDS


class LaunchForm(widgets.VBox):
    """A form that launches one GPU instance from an offer and follows it until it is active.

    ``LaunchForm(cloud, offer=None, *, region=None, name="", offers=None, timeout=900)``: with no
    ``offer`` the form lists the available offers (cheapest first; or ``offers``, when given);
    ``offer`` is an :class:`~gpucloud_nb.models.InstanceOffer`, its JSON or an ``instanceId``.

    From code: :meth:`fill`, :attr:`problem`, :attr:`body`, :meth:`launch` (a Future of the
    active :class:`~gpucloud_nb.models.InstanceDetails`), :meth:`stop`, :meth:`create_volume`,
    :meth:`refresh`, :attr:`instance`, :attr:`future`, :attr:`launching`, :attr:`volume_problem`.

    CSS classes: ``gpucloud-launch-form`` (the form), ``gpucloud-launch-title``,
    ``gpucloud-launch-name``, ``gpucloud-launch-offer``, ``gpucloud-launch-region``,
    ``gpucloud-launch-os``, ``gpucloud-launch-cloud-init``, ``gpucloud-launch-cloud-init-file``,
    ``gpucloud-launch-cloud-init-note``, ``gpucloud-launch-image``, ``gpucloud-launch-volume``,
    ``gpucloud-volume-create-toggle``, ``gpucloud-volume-create``, ``gpucloud-volume-info``,
    ``gpucloud-volume-name``, ``gpucloud-volume-size``, ``gpucloud-volume-create-button``,
    ``gpucloud-volume-reason``, ``gpucloud-volume-status``, ``gpucloud-launch-ssh-key``,
    ``gpucloud-launch-ssh-key-id``, ``gpucloud-launch-cost``, ``gpucloud-launch-reason``,
    ``gpucloud-launch-button``, ``gpucloud-launch-progress``, ``gpucloud-launch-elapsed``,
    ``gpucloud-launch-stop``, ``gpucloud-launch-status`` (with ``gpucloud-status``, and
    ``gpucloud-error`` while it shows an error), ``gpucloud-launch-result``,
    ``gpucloud-launch-ssh``.
    """

    def __init__(self, cloud: Any, offer: Any = None, *, region: str | None = None, name: str = "",
                 provider: str | None = None,
                 offers: Sequence[Any] | None = None, timeout: float = 900.0,
                 expected_launch_seconds: float | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.add_class("gpucloud-launch-form")
        self.layout.padding = "6px"
        self._cloud = cloud
        self.timeout = timeout
        self.expected_launch_seconds = expected_launch_seconds or _expected_launch_seconds(cloud)
        self.instance: Instance | InstanceDetails | None = None
        self._future: Future[InstanceDetails] | None = None
        self._stop_event = threading.Event()
        self._lock = threading.RLock()
        self._quiet = 0
        self._volumes: list[Volume] = []
        self._volume_offers: list[VolumeOffer] = []
        self._used_hourly: float | None = None
        self._running: list[dict[str, Any]] = []
        self._launching = False
        self._waited = 0.0
        self._built = False
        self._built_offer: InstanceOffer | None = None
        self._built_volumes_for: tuple[Any, Any] | None = None
        self._build_widgets()

        self.status = StatusLine("gpucloud-launch-status")
        self.volume_status = StatusLine("gpucloud-volume-status")
        self._wire()
        self._layout_children()

        with self._quietly():
            self.name.value = name
            try:
                self._load_offers(offer, offers, provider)
                self._load_account()
            except Exception as error:
                self.status.error(error)
        self._sync()
        if region is not None and self.offer.value is not None:
            with self._quietly():
                choose(self.region, region, "{} (not available for this offer)")
            self._sync()

    # ------------------------------------------------------------------ construction

    def _build_widgets(self) -> None:
        def text(description: str, css: str, placeholder: str = "", layout: Any = _MEDIUM) -> Any:
            widget = widgets.Text(description=description, placeholder=placeholder, style=STYLE,
                                  layout=widgets.Layout(width=layout.width))
            widget.add_class(css)
            return widget

        def dropdown(description: str, css: str, layout: Any = _WIDE) -> widgets.Dropdown:
            widget = widgets.Dropdown(description=description, options=[], style=STYLE,
                                      layout=widgets.Layout(width=layout.width))
            widget.add_class(css)
            return widget

        self.title = widgets.HTML()
        self.title.add_class("gpucloud-launch-title")
        self.name = text("Name", "gpucloud-launch-name", "train-1")
        self.offer = dropdown("Offer", "gpucloud-launch-offer")
        self.region = dropdown("Region", "gpucloud-launch-region", _MEDIUM)
        self.os = dropdown("OS image", "gpucloud-launch-os", _MEDIUM)
        self.cloud_init_note = widgets.HTML()
        self.cloud_init_note.add_class("gpucloud-launch-cloud-init-note")
        self.cloud_init = widgets.Textarea(
            description="cloud-init script", placeholder="#cloud-config\npackages:\n  - htop",
            rows=4, style=STYLE, layout=widgets.Layout(width=_WIDE.width))
        self.cloud_init.add_class("gpucloud-launch-cloud-init")
        self.cloud_init_file = widgets.FileUpload(description="Upload script", accept="",
                                                  multiple=False, icon="upload")
        self.cloud_init_file.add_class("gpucloud-launch-cloud-init-file")
        self.image = text("Container image", "gpucloud-launch-image", "vllm/vllm-openai:latest",
                          _WIDE)

        self.volume = dropdown("Volume", "gpucloud-launch-volume", _MEDIUM)
        self.volume_create_toggle = widgets.Button(description="New volume…", icon="plus",
                                                   tooltip="Create a persistent volume here")
        self.volume_create_toggle.add_class("gpucloud-volume-create-toggle")
        self.volume_info = widgets.HTML()
        self.volume_info.add_class("gpucloud-volume-info")
        self.volume_name = text("Volume name", "gpucloud-volume-name", "data")
        self.volume_size = widgets.IntText(description="Size (GB)", value=100, style=STYLE,
                                           layout=widgets.Layout(width="14em"))
        self.volume_size.add_class("gpucloud-volume-size")
        self.volume_create_button = widgets.Button(description="Create volume", icon="hdd-o",
                                                   disabled=True)
        self.volume_create_button.add_class("gpucloud-volume-create-button")
        self.volume_reason = widgets.HTML()
        self.volume_reason.add_class("gpucloud-volume-reason")

        self.ssh_key = widgets.Textarea(description="SSH public key",
                                        placeholder="ssh-ed25519 AAAA… you@laptop", rows=2,
                                        style=STYLE, layout=widgets.Layout(width=_WIDE.width))
        self.ssh_key.add_class("gpucloud-launch-ssh-key")
        self.ssh_key_id = text("or saved SSH key id", "gpucloud-launch-ssh-key-id")

        self.auto_delete = widgets.BoundedIntText(
            value=0, min=0, max=7 * 24 * 60, description="Auto-delete after (min, 0 = never)",
            style=STYLE, layout=widgets.Layout(width="24em"))
        self.auto_delete.add_class("gpucloud-launch-auto-delete")
        self.cost = widgets.HTML()
        self.cost.add_class("gpucloud-launch-cost")
        self.reason = widgets.HTML()
        self.reason.add_class("gpucloud-launch-reason")
        self.launch_button = widgets.Button(description="Launch", button_style="primary",
                                            icon="rocket", disabled=True)
        self.launch_button.add_class("gpucloud-launch-button")
        self.progress = widgets.FloatProgress(value=0.0, min=0.0, max=1.0, bar_style="info",
                                              layout=widgets.Layout(width="20em"))
        self.progress.add_class("gpucloud-launch-progress")
        self.elapsed = widgets.HTML()
        self.elapsed.add_class("gpucloud-launch-elapsed")
        self.stop_button = widgets.Button(description="Stop waiting", icon="stop",
                                          button_style="warning",
                                          tooltip="Stop waiting; the instance keeps launching")
        self.stop_button.add_class("gpucloud-launch-stop")
        self.result = widgets.HTML()
        self.result.add_class("gpucloud-launch-result")
        self.ssh_command = widgets.Text(description="SSH", disabled=True, style=STYLE,
                                        layout=widgets.Layout(width=_WIDE.width))
        self.ssh_command.add_class("gpucloud-launch-ssh")

    def _layout_children(self) -> None:
        self.cloud_init_box = widgets.VBox([self.cloud_init_note, self.cloud_init,
                                            self.cloud_init_file])
        self.vm_box = widgets.VBox([self.os, self.cloud_init_box])
        self.container_box = widgets.VBox([self.image])
        self.volume_create_box = widgets.VBox([
            self.volume_info,
            widgets.HBox([self.volume_name, self.volume_size, self.volume_create_button]),
            self.volume_reason, self.volume_status,
        ])
        self.volume_create_box.add_class("gpucloud-volume-create")
        self.volume_create_box.layout.margin = "0 0 0 2em"
        show(self.volume_create_box, False)
        self.progress_box = widgets.HBox([self.progress, self.elapsed, self.stop_button])
        show(self.progress_box, False)
        self.result_box = widgets.VBox([self.result, self.ssh_command])
        show(self.result_box, False)
        self.children = (
            self.title, self.name, self.offer, self.region, self.vm_box, self.container_box,
            widgets.HBox([self.volume, self.volume_create_toggle]), self.volume_create_box,
            self.ssh_key, self.ssh_key_id, self.auto_delete, self.cost,
            widgets.HBox([self.launch_button, self.reason]),
            self.progress_box, self.status, self.result_box,
        )

    def _wire(self) -> None:
        def on(widget: widgets.Widget, handler: Any, status: StatusLine | None = None) -> None:
            widget.observe(guarded(status or self.status, handler), names="value")

        on(self.offer, lambda _: self._on_offer_or_region())
        on(self.region, lambda _: self._on_offer_or_region())
        for widget in (self.name, self.os, self.cloud_init, self.image, self.volume, self.ssh_key,
                       self.ssh_key_id, self.auto_delete):
            on(widget, lambda _: self._on_field())
        on(self.cloud_init_file, self._uploaded)
        on(self.volume_name, lambda _: self._update_volume_create(), self.volume_status)
        on(self.volume_size, lambda _: self._update_volume_create(), self.volume_status)
        self.launch_button.on_click(guarded(self.status, lambda _: self.launch()))
        self.stop_button.on_click(guarded(self.status, lambda _: self.stop()))
        self.volume_create_toggle.on_click(guarded(self.volume_status,
                                                   lambda _: self._toggle_volume_create()))
        self.volume_create_button.on_click(guarded(self.volume_status,
                                                   lambda _: self.create_volume()))

    @contextlib.contextmanager
    def _quietly(self) -> Iterator[None]:
        """Change fields without their observers reacting (the caller re-checks)."""
        with self._lock:
            self._quiet += 1
            try:
                yield
            finally:
                self._quiet -= 1

    def _on_offer_or_region(self) -> None:
        if not self._quiet:
            self._sync()

    def _on_field(self) -> None:
        if not self._quiet:
            self._update()

    def _sync(self, *, volumes: bool = False) -> None:
        """Bring regions, OS images and volumes in line with the offer and region; re-check."""
        with self._lock:
            offer = self._offer
            if not self._built or offer != self._built_offer:
                with self._quietly():
                    self._rebuild_for_offer()
                self._built_offer, self._built = offer, True
            key = (offer, self.region.value)
            if volumes or key != self._built_volumes_for:
                with self._quietly():
                    self._rebuild_volumes()
                self._built_volumes_for = key
            self._update_volume_create()
            self._update()

    # ------------------------------------------------------------------ data

    def _load_offers(self, offer: Any, offers: Sequence[Any] | None,
                     provider: str | None = None) -> None:
        if isinstance(offer, str):
            candidates = [_as_offer(o) for o in offers] if offers is not None else \
                self._cloud.instances.offers()
            offer = find_offer(candidates, offer, provider)
        if offer is not None:
            chosen = _as_offer(offer)
            self.offer.options = [(offer_label(chosen), chosen)]
            self.offer.value = chosen
            self.offer.disabled = True
            return
        if offers is None:
            listed = self._cloud.instances.offers(available=True, sort="price")
        else:
            listed = [_as_offer(o) for o in offers]
        self.offer.options = [("— choose an offer —", None)] + [(offer_label(o), o) for o in listed]
        choose(self.offer, None)

    def _load_account(self) -> None:
        """Volumes, volume offers and (with a cost cap) the hourly price already running."""
        self._volume_offers = list(self._cloud.volumes.offers())
        self._volumes = list(self._cloud.volumes.list())
        self._load_used_hourly()

    def _load_used_hourly(self) -> None:
        cap = self._cloud.max_hourly_cost
        if cap is None:
            self._used_hourly = None
            return
        self._running = [i.raw for i in self._cloud.instances.list()]
        self._used_hourly, _ = costcap.running_hourly(cap, self._running)

    def refresh(self) -> None:
        """Reload volumes, volume offers and the running hourly cost, then re-check the form."""
        try:
            self._load_account()
            self._sync(volumes=True)
        except Exception as error:
            self.status.error(error)
            raise

    # ------------------------------------------------------------------ reactions

    @property
    def _offer(self) -> InstanceOffer | None:
        return self.offer.value

    def _rebuild_for_offer(self) -> None:
        offer = self._offer
        if offer is None:
            self.title.value = "<b>Launch a GPU instance</b>"
            set_options(self.region, [])
            set_options(self.os, [])
            show(self.vm_box, False)
            show(self.container_box, False)
            return
        self.title.value = (
            f"<b>Launch {escape(offer.gpu_name)} ×{offer.gpu_count}</b> · "
            f"{escape(offer.deployment_type)} · {escape(offer.cloud.name)} · "
            f"<code>{escape(offer.instance_id)}</code>"
        )
        regions = [(f"{a.region} — {a.name}", a.region) for a in offer.availability if a.available]
        set_options(self.region, regions)
        container = offer.deployment_type == "container"
        show(self.container_box, container)
        show(self.vm_box, not container)
        images = offer.configuration.os
        set_options(self.os, [("— choose an OS image —", None)] + [(o, o) for o in images],
                    images[0] if images else None, keep=False)

    def _volume_offer(self) -> VolumeOffer | None:
        offer = self._offer
        if offer is None:
            return None
        return next((v for v in self._volume_offers if v.cloud_provider.id == offer.cloud.id), None)

    def _usable_volumes(self) -> list[Volume]:
        offer, region = self._offer, self.region.value
        if offer is None or region is None:
            return []
        return [v for v in self._volumes if v.region == region
                and (v.cloud_provider is None or v.cloud_provider.id == offer.cloud.id)]

    def _rebuild_volumes(self) -> None:
        options = [("none", None)] + [(f"{v.name} ({v.size_in_gb:g} GB)", v.id)
                                      for v in self._usable_volumes()]
        set_options(self.volume, options, None)
        volume_offer = self._volume_offer()
        if volume_offer is not None and self.volume_size.value < volume_offer.min_size_in_gb:
            self.volume_size.value = int(-(-volume_offer.min_size_in_gb // 1))

    def _uploaded(self, change: Mapping[str, Any]) -> None:
        files = change.get("new") or ()
        if not files:
            return
        upload = dict(files[0])
        content = upload.get("content") or b""
        try:
            text = bytes(content).decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidInputError(
                f"The cloud-init file {upload.get('name', '')} is not UTF-8 text.") from None
        finally:
            self.cloud_init_file.value = ()
        self.cloud_init.value = text
        self.status.info(f"Loaded the cloud-init script from {upload.get('name', 'the file')} "
                         f"({len(text.encode('utf-8'))} bytes).")

    def _toggle_volume_create(self) -> None:
        visible = self.volume_create_box.layout.display == "none"
        show(self.volume_create_box, visible)
        self.volume_create_toggle.description = "Hide" if visible else "New volume…"
        self._update_volume_create()

    # ------------------------------------------------------------------ the checks

    @property
    def body(self) -> dict[str, Any] | None:
        """The CreateInstance JSON the form would send (``None`` without an offer)."""
        offer = self._offer
        if offer is None:
            return None
        body: dict[str, Any] = {
            "name": self.name.value.strip(), "cloudProvider": offer.cloud.id,
            "instanceId": offer.instance_id, "region": self.region.value,
        }
        if self.volume.value is not None:
            body["volumeId"] = self.volume.value
        if self.ssh_key.value.strip():
            body["sshKey"] = self.ssh_key.value.strip()
        if self.ssh_key_id.value.strip():
            body["sshKeyId"] = self.ssh_key_id.value.strip()
        if offer.deployment_type == "container":
            body["dockerContainer"] = {"image": self.image.value.strip()}
        else:
            vm: dict[str, Any] = {"os": self.os.value}
            if self.cloud_init.value.strip():
                vm["base64CloudInitScript"] = base64.b64encode(
                    self.cloud_init.value.encode("utf-8")).decode("ascii")
            body["vm"] = vm
        return body

    @property
    def problem(self) -> str | None:
        """``None`` when the form can launch, else one sentence saying what to fix."""
        offer = self._offer
        if offer is None:
            return "Choose an offer to launch."
        if not self.name.value.strip():
            return "Give the instance a name."
        if self.region.value is None:
            if not offer.available_regions:
                return f"Offer '{offer.instance_id}' is not available in any region right now."
            return "Choose a region."
        if offer.deployment_type == "container":
            if not self.image.value.strip():
                return "Give the container image to run, for example vllm/vllm-openai:latest."
            if self.cloud_init.value.strip():
                return "Container offers run no cloud-init script; clear it or choose a vm offer."
        elif self.os.value is None:
            return f"Choose an OS image for this {offer.deployment_type} offer."
        body = self.body or {}
        offers = [_offer_json(offer)]
        if body.get("volumeId") is None:
            problem = rules.instance_create_problem(body, offers)
        else:  # check the volume too: same provider and region (None: not one of ours)
            found = [v for v in self._volumes if v.id == body["volumeId"]]
            problem = rules.instance_create_problem(body, offers,
                                                    _volume_json(found[0]) if found else None)
        if problem:
            return problem
        return self._cap_problem(offer)

    def _cap_problem(self, offer: InstanceOffer) -> str | None:
        if self._used_hourly is None:
            return None
        return costcap.cap_problem(self._cloud.max_hourly_cost, self._running, _offer_json(offer))

    @property
    def volume_problem(self) -> str | None:
        """``None`` when the "create volume" shortcut can create, else one sentence."""
        offer, region = self._offer, self.region.value
        if offer is None or region is None:
            return "Choose an offer and a region first."
        volume_offer = self._volume_offer()
        if volume_offer is None:
            return f"{offer.cloud.name} sells no volumes."
        if not self.volume_name.value.strip():
            return "Give the volume a name."
        if self.volume_size.value < volume_offer.min_size_in_gb:
            return (f"A {offer.cloud.name} volume must be at least "
                    f"{volume_offer.min_size_in_gb:g} GB; {self.volume_size.value} GB was asked for.")
        body = {"cloudProvider": offer.cloud.id, "region": region,
                "name": self.volume_name.value.strip(), "sizeInGb": self.volume_size.value}
        return rules.volume_create_problem(body, [_volume_offer_json(v) for v in self._volume_offers])

    def _update_volume_create(self) -> None:
        offer, region, volume_offer = self._offer, self.region.value, self._volume_offer()
        if offer is None or region is None:
            info = "Choose an offer and a region to create a volume there."
        elif volume_offer is None:
            info = f"{escape(offer.cloud.name)} sells no volumes."
        else:
            size = max(self.volume_size.value, 0)
            hourly = size * volume_offer.price_per_gb_per_hour
            info = (f"{escape(volume_offer.cloud_provider.display_name or offer.cloud.name)} "
                    f"volumes: at least <b>{volume_offer.min_size_in_gb:g} GB</b>, "
                    f"{escape(money(volume_offer.price_per_gb_per_hour))}/GB/h — "
                    f"{size} GB ≈ {escape(per_hour(hourly))} ({escape(per_day(hourly))}).")
        self.volume_info.value = f'<span style="color:#555">{info}</span>'
        problem = self.volume_problem
        self.volume_create_button.disabled = problem is not None
        self.volume_reason.value = "" if problem is None else \
            f'<span style="color:#8a5a00">{escape(problem)}</span>'

    def _cost_html(self) -> str:
        offer = self._offer
        if offer is None:
            return ""
        parts = [f"<b>Cost</b>: {escape(per_hour(offer.hourly_price))} · "
                 f"{escape(per_day(offer.hourly_price))}"]
        volume = next((v for v in self._volumes if v.id == self.volume.value), None)
        volume_offer = self._volume_offer()
        if volume is not None and volume_offer is not None:
            hourly = volume.size_in_gb * volume_offer.price_per_gb_per_hour
            parts.append(f" + volume {escape(volume.name)} {escape(per_hour(hourly))} (billed "
                         "while it exists)")
        minutes = self.auto_delete.value
        if minutes:
            parts.append(f"<br>Auto-deletes after {minutes} min, if this kernel is still running: "
                         f"at most {escape(money(offer.hourly_price * minutes / 60))}.")
        cap = self._cloud.max_hourly_cost
        if cap is not None and self._used_hourly is not None:
            after = self._used_hourly + offer.hourly_price
            colour = "#b00020" if self._cap_problem(offer) else "#555"
            parts.append(
                f'<br><span style="color:{colour}">Cap {escape(per_hour(cap))} (max_hourly_cost): '
                f"{escape(per_hour(self._used_hourly))} already used by pending and active "
                f"instances; {escape(per_hour(after))} after this launch.</span>")
        return "".join(parts)

    def _update(self) -> None:
        if self._quiet:
            return
        with self._lock:
            offer = self._offer
            if offer is not None and offer.deployment_type != "container":
                has_script = bool(self.cloud_init.value.strip())
                show(self.cloud_init_box, offer.cloud_init_available or has_script)
                self.cloud_init_note.value = "" if offer.cloud_init_available else (
                    '<span style="color:#8a5a00">This offer does not run cloud-init scripts.</span>')
            self.cost.value = self._cost_html()
            launching = self.launching
            problem = self.problem
            self.launch_button.disabled = launching or problem is not None
            self.launch_button.description = "Launching…" if launching else "Launch"
            self.reason.value = "" if problem is None or launching else (
                f'<span style="color:#8a5a00">{escape(problem)}</span>')

    # ------------------------------------------------------------------ from code

    def fill(self, **values: Any) -> LaunchForm:
        """Set fields by name: ``offer``, ``name``, ``region``, ``os``, ``image``, ``cloud_init``,
        ``volume_id``, ``ssh_key``, ``ssh_key_id``, ``auto_delete_minutes``; returns the form.

        Values the form does not offer are kept and explained by :attr:`problem`.
        """
        unknown = sorted(set(values) - set(_FILL_KEYS))
        if unknown:
            raise TypeError(f"fill() got unknown field(s) {', '.join(unknown)}; "
                            f"use: {', '.join(_FILL_KEYS)}.")
        with self._quietly():
            if "offer" in values:
                self._fill_offer(values["offer"])
            self._sync()  # regions, OS images and volumes of the offer, before choosing among them
            if "name" in values:
                self.name.value = values["name"] or ""
            if "region" in values:
                choose(self.region, values["region"], "{} (not available for this offer)")
                self._sync()  # the volumes of that region
            if "os" in values:
                choose(self.os, values["os"], "{} (not offered)")
            if "image" in values:
                self.image.value = values["image"] or ""
            if "cloud_init" in values:
                self.cloud_init.value = self._script_text(values["cloud_init"])
            if "volume_id" in values:
                choose(self.volume, values["volume_id"], "{} (not found here)")
            if "ssh_key" in values:
                self.ssh_key.value = values["ssh_key"] or ""
            if "ssh_key_id" in values:
                self.ssh_key_id.value = values["ssh_key_id"] or ""
            if "auto_delete_minutes" in values:
                self.auto_delete.value = values["auto_delete_minutes"] or 0
        self._sync()
        return self

    def _fill_offer(self, offer: Any) -> None:
        if isinstance(offer, str):
            listed = [v for _, v in self.offer.options if v is not None]
            if not any(v.instance_id == offer for v in listed):
                raise InvalidInputError(f"This form offers no offer with instanceId '{offer}'.")
            offer = find_offer(listed, offer)
        offer = None if offer is None else _as_offer(offer)
        if offer not in [v for _, v in self.offer.options]:
            self.offer.options = [*self.offer.options, (offer_label(offer), offer)]
        self.offer.value = offer

    @staticmethod
    def _script_text(script: Any) -> str:
        if script is None:
            return ""
        if isinstance(script, bytes):
            try:
                return script.decode("utf-8")
            except UnicodeDecodeError:
                raise InvalidInputError("The cloud-init script is not UTF-8 text.") from None
        if isinstance(script, os.PathLike):
            try:
                return Path(script).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as error:
                raise InvalidInputError(f"The cloud-init file {script} could not be read "
                                        f"({getattr(error, 'strerror', None) or error}).") from None
        return str(script)

    @property
    def future(self) -> Future[InstanceDetails] | None:
        """The Future of the latest launch (also when it was started by the Launch button)."""
        return self._future

    @property
    def launching(self) -> bool:
        """True while a launch is being sent or waited on."""
        return self._launching

    def create_volume(self, name: str | None = None, size_gb: float | None = None) -> Volume:
        """Create a volume for the chosen offer's provider and region, and select it.

        Uses the shortcut's fields; ``name`` and ``size_gb`` fill them first. The provider's
        minimum size is enforced (see :attr:`volume_problem`).
        """
        try:
            if name is not None:
                self.volume_name.value = name
            if size_gb is not None:
                self.volume_size.value = int(size_gb)
            problem = self.volume_problem
            if problem:
                raise InvalidInputError(problem)
            offer = self._offer
            assert offer is not None
            created = self._cloud.volumes.create(
                name=self.volume_name.value.strip(), cloud_provider=offer.cloud.id,
                region=self.region.value, size_in_gb=self.volume_size.value)
            self._volumes = [v for v in self._cloud.volumes.list() if v.id != created.id]
            self._volumes.append(created)
            self._sync(volumes=True)
            self.volume.value = created.id
        except Exception as error:
            self.volume_status.error(error)
            raise
        self.volume_status.success(
            f"Created volume {created.name} ({created.size_in_gb:g} GB) in {created.region}; "
            "it is selected for this instance.")
        show(self.volume_create_box, False)
        self.volume_create_toggle.description = "New volume…"
        self._update()
        return created

    def launch(self) -> Future[InstanceDetails]:
        """Launch in a background thread; the Future gives the active InstanceDetails or raises.

        While a launch runs, calling again returns the same Future. A form with a
        :attr:`problem` returns a Future that raises :class:`InvalidInputError` with it.
        """
        with self._lock:
            if self.launching:
                assert self._future is not None
                return self._future
            future: Future[InstanceDetails] = Future()
            future.set_running_or_notify_cancel()
            problem = self.problem
            if problem:
                self.status.error(problem)
                settle(future, error=InvalidInputError(problem))
                self._future = future
                return future
            body = self.body
            assert body is not None
            self._stop_event = stop = threading.Event()
            self._future = future
            self._launching = True
            self.instance = None
            show(self.result_box, False)
            self.result.value = ""
            self.progress.value = 0.0
            self.progress.bar_style = "info"
            self.elapsed.value = "sending…"
            show(self.stop_button, True)
            show(self.progress_box, True)
            self.status.info(f"Launching {body['name']}…")
            self._update()
        delete_after = self.auto_delete.value * 60 or None
        weakref.finalize(self, stop.set)  # a form garbage-collected mid-wait ends the thread
        threading.Thread(target=_launch_thread,
                         args=(weakref.ref(self), self._cloud, body, delete_after, future, stop),
                         daemon=True, name="gpucloud-nb-launch").start()
        return future

    def _failed(self, error: BaseException) -> None:
        try:
            self.progress.bar_style = "danger"
            self.status.error(error)
        finally:
            self._finish()

    def _succeeded(self, details: InstanceDetails) -> None:
        self.instance = details
        self.progress.value = 1.0
        self.progress.bar_style = "success"
        self.elapsed.value = escape(f"active after {duration(self._waited)}")
        self._show_result(details)
        self.status.success(f"{details.name} is active.")

    def _refresh_used_hourly(self) -> None:
        try:
            self._load_used_hourly()
        except Exception:
            log.debug("Could not reload the running hourly cost", exc_info=True)

    def _finish(self) -> None:
        """Back to idle: the Launch button re-checks the form (before the Future settles)."""
        with self._lock:
            self._launching = False
        try:
            show(self.stop_button, False)
            self._update()
        except Exception as error:
            self.status.error(error)

    def _show_result(self, details: InstanceDetails) -> None:
        ssh = details.ssh_command or ""
        facts = join_nonempty([
            f"<b>{escape(details.name)}</b> is <b>{escape(details.status)}</b>",
            f"IP {escape(details.ip)}" if details.ip else "",
            escape(details.region_id),
            f"{escape(per_hour(details.hourly_price))} ({escape(per_day(details.hourly_price))})",
            f"ports {escape(', '.join(map(str, details.port_forwards)))}" if details.port_forwards else "",
            f"id <code>{escape(details.id)}</code>",
        ])
        volumes = ", ".join(escape(" at ".join(map(str, v)) if isinstance(v, list | tuple) else v)
                            for v in details.volumes)
        self.result.value = facts + (f"<br>Volumes: {volumes}" if volumes else "")
        self.ssh_command.value = ssh
        show(self.ssh_command, bool(ssh))
        show(self.result_box, True)

    def stop(self) -> None:
        """Stop waiting for the launch; the instance keeps launching (and is billed once active)."""
        with self._lock:
            future = self._future
            if not self._launching or future is None:
                return
            self._stop_event.set()
        instance = self.instance
        if instance is not None:
            message = (f"Stopped waiting; instance {instance.name} ({instance.id}) keeps launching "
                       "and is billed once active: watch or delete it in InstancesPanel.")
        else:
            message = ("Stopped waiting; the launch request was already sent, so the instance may "
                       "still appear and be billed: check InstancesPanel.")
        self.progress.bar_style = "warning"
        self.status.warning(message)
        self._finish()
        settle(future, error=WaitStopped(message))

    def close(self) -> None:
        """Stop waiting (the launch itself goes on in the cloud, see :meth:`stop`) and close; the
        launch thread ends at its next poll."""
        self.stop()
        super().close()

    def __repr__(self) -> str:
        offer = self._offer
        what = offer.instance_id if offer is not None else "no offer"
        return f"<LaunchForm {what} problem={self.problem!r}>"

