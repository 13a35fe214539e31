"""``LaunchForm``: fill in, check and launch one GPU instance, then watch it become active.

    >>> form = LaunchForm(cloud, offer)  # or LaunchForm(cloud): pick from a dropdown  # doctest: +SKIP
    >>> form.fill(name="train-1", os="ubuntu-22.04", ssh_key=open("id.pub").read())  # doctest: +SKIP
    >>> form.problem                                 # None, or why Launch is disabled  # doctest: +SKIP
    >>> details = form.launch().result(timeout=600)  # a concurrent.futures.Future  # doctest: +SKIP
    >>> cloud.instances.ssh_command(details.id)  # also shown in the form  # doctest: +SKIP
    'ssh -o UserKnownHostsFile=... -o HostKeyAlias=... -p 40122 ubuntu@127.0.0.1'

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
  :class:`~gpucloud_nb.errors.WaitStopped`; the instance keeps launching on the cloud.
- The cost preview and the cap count the hourly price of pending and active instances and of
  the inference endpoints at their most containers, as a create does
  (``instances.endpoints_hourly()``; list calls at construction and after each launch, only
  when the client has ``max_hourly_cost``).
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future
from typing import Any

import ipywidgets as widgets

from gpucloud_nb.client import costcap
from gpucloud_nb.client.management import GPUCloud
from gpucloud_nb.display import format_duration
from gpucloud_nb.durations import parse_optional_duration
from gpucloud_nb.errors import GPUCloudError, InvalidInputError, WaitStopped
from gpucloud_nb.launch_model import (
    DEFAULT_EXPECTED_LAUNCH_SECONDS,
    LaunchChoice,
    as_offer,
    offer_label,
)
from gpucloud_nb.launch_model import (
    expected_launch_seconds as sandbox_launch_seconds,
)
from gpucloud_nb.models import Instance, InstanceDetails, InstanceOffer, Volume, VolumeOffer
from gpucloud_nb.rules import find_offer
from gpucloud_nb.widgets._background import settle
from gpucloud_nb.widgets._dropdowns import choose, set_options
from gpucloud_nb.widgets._format import escape
from gpucloud_nb.widgets._launch_fill import FillFromCode
from gpucloud_nb.widgets._launch_text import cost_html, result_html, title_html
from gpucloud_nb.widgets._launch_thread import launch_thread
from gpucloud_nb.widgets._layout import show
from gpucloud_nb.widgets._status import WARNING, StatusLine, guarded, hint, log

__all__ = ["DEFAULT_EXPECTED_LAUNCH_SECONDS", "LaunchForm", "offer_label"]


#: Characters per line of the SSH box (42em, the description aside), counted short.
_SSH_LINE = 48


class LaunchForm(FillFromCode):
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
    ``gpucloud-launch-ssh-key-id``, ``gpucloud-launch-budget``, ``gpucloud-launch-cost``,
    ``gpucloud-launch-reason``,
    ``gpucloud-launch-button``, ``gpucloud-launch-progress``, ``gpucloud-launch-elapsed``,
    ``gpucloud-launch-stop``, ``gpucloud-launch-status`` (with ``gpucloud-status``, and
    ``gpucloud-error`` while it shows an error), ``gpucloud-launch-result``,
    ``gpucloud-launch-ssh``.
    """

    def __init__(self, cloud: GPUCloud,
                 offer: InstanceOffer | Mapping[str, Any] | str | None = None, *,
                 region: str | None = None, name: str = "",
                 provider: str | None = None,
                 offers: Sequence[InstanceOffer | Mapping[str, Any]] | None = None,
                 timeout: float = 900.0,
                 expected_launch_seconds: float | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.add_class("gpucloud-launch-form")
        self.layout.padding = "6px"
        self._cloud = cloud
        self.timeout = timeout
        self.expected_launch_seconds = expected_launch_seconds or sandbox_launch_seconds(cloud)
        self.instance: Instance | InstanceDetails | None = None
        self._future: Future[InstanceDetails] | None = None
        self._stop_event = threading.Event()
        self._lock = threading.RLock()
        self._quiet = 0
        self._volumes: list[Volume] = []
        self._volume_offers: list[VolumeOffer] = []
        self._used_hourly: float | None = None
        self._running: list[Instance] = []
        self._endpoints_hourly = 0.0  # the inference endpoints' $/h at their most containers
        self._launching = False
        self._built = False
        self._built_offer: InstanceOffer | None = None
        self._built_volumes_for: tuple[Any, Any] | None = None
        self._wire()

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

    def _wire(self) -> None:
        def on(widget: widgets.Widget, handler: Any, status: StatusLine | None = None) -> None:
            widget.observe(guarded(status or self.status, handler), names="value")

        on(self.offer, lambda _: self._on_offer_or_region())
        on(self.region, lambda _: self._on_offer_or_region())
        for widget in (self.name, self.os, self.cloud_init, self.image, self.volume, self.ssh_key,
                       self.ssh_key_id, self.auto_delete, self.budget, self.idle_delete):
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

    def _load_offers(self, offer: InstanceOffer | Mapping[str, Any] | str | None,
                     offers: Sequence[InstanceOffer | Mapping[str, Any]] | None,
                     provider: str | None = None) -> None:
        if isinstance(offer, str):
            candidates = [as_offer(o) for o in offers] if offers is not None else \
                self._cloud.instances.offers()
            offer = find_offer(candidates, offer, provider)
        if offer is not None:
            chosen = as_offer(offer)
            self.offer.options = [(offer_label(chosen), chosen)]
            self.offer.value = chosen
            self.offer.disabled = True
            return
        if offers is None:
            listed = self._cloud.instances.offers(available=True, sort="price")
        else:
            listed = [as_offer(o) for o in offers]
        self.offer.options = [("— choose an offer —", None)] + [(offer_label(o), o) for o in listed]
        choose(self.offer, None)

    def _load_account(self) -> None:
        """Volumes, volume offers, (with a cost cap) the hourly price already running, and a
        class gateway's warning about this key's budget."""
        self._volume_offers = list(self._cloud.volumes.offers())
        self._volumes = list(self._cloud.volumes.list())
        self._load_used_hourly()
        gateway = self._cloud.gateway_status()  # a class gateway's 80 % or spent sentence
        if gateway is not None and gateway.sentence():
            self.status.warning(gateway.sentence())

    def _load_used_hourly(self) -> None:
        cap = self._cloud.max_hourly_cost
        if cap is None:
            self._used_hourly = None
            return
        self._running = self._cloud.instances.list()
        self._endpoints_hourly = self._cloud.instances.endpoints_hourly()  # as creates count
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

    def _rebuild_for_offer(self) -> None:
        offer = self._offer
        self.title.value = title_html(offer)
        if offer is None:
            set_options(self.region, [])
            set_options(self.os, [])
            show(self.vm_box, False)
            show(self.container_box, False)
            return
        regions = [(f"{a.region} — {a.name}", a.region) for a in offer.availability if a.available]
        set_options(self.region, regions)
        container = offer.deployment_type == "container"
        show(self.container_box, container)
        show(self.vm_box, not container)
        images = offer.configuration.os
        set_options(self.os, [("— choose an OS image —", None)] + [(o, o) for o in images],
                    images[0] if images else None, keep=False)

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

    # ------------------------------------------------------------------ the checks

    @property
    def choice(self) -> LaunchChoice:
        """The form's values as a :class:`~gpucloud_nb.launch_model.LaunchChoice`."""
        return LaunchChoice(
            offer=self._offer, name=self.name.value, region=self.region.value, os=self.os.value,
            image=self.image.value, cloud_init=self.cloud_init.value, volume_id=self.volume.value,
            ssh_key=self.ssh_key.value, ssh_key_id=self.ssh_key_id.value)

    @property
    def body(self) -> dict[str, Any] | None:
        """The CreateInstance JSON the form would send (``None`` without an offer and region)."""
        choice = self.choice
        if choice.offer is None or choice.region is None:
            return None
        return choice.request().body()

    @property
    def problem(self) -> str | None:
        """``None`` when the form can launch, else one sentence saying what to fix."""
        try:
            self._durations()
        except ValueError as bad:
            return str(bad)
        return self.choice.problem(volumes=self._volumes, cap=self._cap(), running=self._running,
                                   endpoints=self._endpoints_hourly)

    def _durations(self) -> tuple[float | None, float | None]:
        """The auto-delete and idle fields in seconds (``None`` when empty); ValueError with one
        sentence when one is not a duration (:mod:`gpucloud_nb.durations`)."""
        return (parse_optional_duration(self.auto_delete.value, "Auto-delete after"),
                parse_optional_duration(self.idle_delete.value, "Delete when idle for"))

    def _cap(self) -> float | None:
        return None if self._used_hourly is None else self._cloud.max_hourly_cost

    def _cap_problem(self, offer: InstanceOffer) -> str | None:
        return costcap.cap_problem(self._cap(), self._running, offer,
                                   endpoints=self._endpoints_hourly)

    def _update(self) -> None:
        if self._quiet:
            return
        with self._lock:
            offer = self._offer
            if offer is not None and offer.deployment_type != "container":
                has_script = bool(self.cloud_init.value.strip())
                show(self.cloud_init_box, offer.cloud_init_available or has_script)
                self.cloud_init_note.value = "" if offer.cloud_init_available else (
                    hint("This offer does not run cloud-init scripts.", WARNING))
            self.cost.value = "" if offer is None else cost_html(
                offer, volume=next((v for v in self._volumes if v.id == self.volume.value), None),
                volume_offer=self._volume_offer(), delete_after=self._delete_after(),
                kept_by=self._cloud.auto_delete.where, cap=self._cloud.max_hourly_cost,
                budget=self.budget.value, budget_by=self._cloud.budgets.where,
                used_hourly=self._used_hourly, endpoints=self._endpoints_hourly,
                over_cap=self._cap_problem(offer) is not None)
            watcher = self._cloud.idle_delete.where
            self.idle_note.value = "" if not self.idle_delete.value.strip() else hint(escape(
                "Idle: no SSH session, no busy kernel, GPU under 5 %; " + (
                    f"watched by the {watcher}." if watcher != "nobody" else
                    "nothing watches it without a gateway, so the launch is refused.")))
            launching = self.launching
            problem = self.problem
            self.launch_button.disabled = launching or problem is not None
            self.launch_button.description = "Launching…" if launching else "Launch"
            self.reason.value = "" if problem is None or launching else (
                hint(escape(problem), WARNING))

    def _delete_after(self) -> float | None:
        try:
            return self._durations()[0]
        except ValueError:  # the reason line says so
            return None

    # ------------------------------------------------------------------ from code

    @property
    def future(self) -> Future[InstanceDetails] | None:
        """The Future of the latest launch (also when it was started by the Launch button)."""
        return self._future

    @property
    def launching(self) -> bool:
        """True while a launch is being sent or waited on."""
        return self._launching

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
            delete_after, delete_when_idle = self._durations()  # checked by problem
            request = self.choice.request(delete_after=delete_after,
                                          budget=self.budget.value or None,
                                          delete_when_idle=delete_when_idle)
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
            self.status.info(f"Launching {request.name}…")
            self._update()
        weakref.finalize(self, stop.set)  # a form garbage-collected mid-wait ends the thread
        threading.Thread(target=launch_thread,
                         args=(weakref.ref(self), self._cloud, request, future, stop),
                         daemon=True, name="gpucloud-nb-launch").start()
        return future

    def show_failure(self, error: BaseException) -> None:
        """Show that the launch failed, and go idle (the launch thread calls it)."""
        try:
            self.progress.bar_style = "danger"
            self.status.error(error)
        finally:
            self.set_idle()

    def show_active(self, details: InstanceDetails, waited: float) -> None:
        """Show the active instance after ``waited`` seconds (the launch thread calls it)."""
        self.instance = details
        self.progress.value = 1.0
        self.progress.bar_style = "success"
        self.elapsed.value = escape(f"active after {format_duration(waited)}")
        self._show_result(details)
        self.status.success(f"{details.name} is active.")

    def refresh_used_hourly(self) -> None:
        """Reload the hourly price already running, for the cost cap; a failure is only logged."""
        try:
            self._load_used_hourly()
        except Exception:
            log.debug("Could not reload the running hourly cost", exc_info=True)

    def set_idle(self) -> None:
        """Back to idle: the Launch button re-checks the form (before the Future settles)."""
        with self._lock:
            self._launching = False
        try:
            show(self.stop_button, False)
            self._update()
        except Exception as error:
            self.status.error(error)

    def _show_result(self, details: InstanceDetails) -> None:
        try:  # the command that works as printed (it connects once to learn the host key)
            ssh = self._cloud.instances.ssh_command(details.id, wait=0) if details.ip else ""
        except GPUCloudError as error:
            ssh = str(error)
        self.result.value = result_html(details)
        self.ssh_command.value = ssh
        self.ssh_command.rows = 1 + len(ssh) // _SSH_LINE
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
        self.set_idle()
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

