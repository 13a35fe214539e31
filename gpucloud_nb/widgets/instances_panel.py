"""``InstancesPanel``: your instances with status, age, price and spend; details; safe delete.

    >>> panel = InstancesPanel(cloud)  # doctest: +SKIP
    >>> panel.frame[["name", "status", "hourlyPrice", "spend"]]  # doctest: +SKIP
    >>> panel.details(instance_id)               # InstanceDetails, also shown in the panel  # doctest: +SKIP
    >>> panel.request_delete(instance_id)  # "Delete train-1? Its data is lost unless ..."  # doctest: +SKIP
    >>> panel.confirm_delete()                   # or panel.cancel_delete()  # doctest: +SKIP

Choices, written down once:

- Spend so far comes from ``cloud.spend()`` (see ``gpucloud_nb.client.billing``): billing runs
  while an instance is active or deleting.
- Auto-delete: the ``autoDelete`` column counts down each instance's timer (see
  ``cloud.auto_delete``); for the selected instance, "Auto-delete in" (a duration: 1h, 30m) sets or extends it
  and "Cancel auto-delete" stops it. The gateway keeps the timers, so they
  fire with no kernel running; on the cloud directly (``GPUCLOUD_GATEWAY=off``) a timer is
  refused in one sentence.
- Budget: the ``budget`` column shows what an instance with a budget has cost of it (see
  ``cloud.budgets``), with ⚠ from 80 %; for the selected instance "Budget ($)" sets one.
  Through a class gateway, the status line shows the key's own budget at each refresh
  (``cloud.gateway_status().sentence()``): the 80 % warning, or once it is spent "Your budget of
  $X was spent at HH:MM UTC; deleted: a, b."
- Idle delete: the ``idle`` column reads ``cloud.idle_delete`` (``delete_when_idle``): "idle
  25 min, deletes in 5:00" once the warning is on (five minutes before), "idle 16 min of 30
  min" past half the limit, else the limit; "Keep" starts the selected instance's idle clock
  again. The gateway keeps the clock, whether or not a kernel runs.
- The list refreshes in a daemon thread: every ``interval`` seconds (2 by default) while any
  instance is pending or deleting, every ``LIVE_INTERVAL`` (10 s) while instances are active or
  auto-delete timers run (spend and countdowns move), and not at all otherwise; it also stops
  after three failed refreshes in a row. ``refresh()`` works from code at any time.
- Deleted instances are hidden unless "show deleted" is ticked (the cloud keeps listing them).
- Deleting always asks first; only :meth:`InstancesPanel.confirm_delete` (or its button) sends
  the DELETE.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

import ipywidgets as widgets
import pandas as pd

from gpucloud_nb.client.budgets import BudgetState
from gpucloud_nb.client.idle import IdleState
from gpucloud_nb.client.management import GPUCloud
from gpucloud_nb.durations import parse_duration
from gpucloud_nb.errors import GPUCloudError, InvalidInputError
from gpucloud_nb.models import Instance, InstanceDetails
from gpucloud_nb.widgets._background import RefreshTicks, Repeater
from gpucloud_nb.widgets._dropdowns import set_options
from gpucloud_nb.widgets._format import escape, frame_html, money, per_hour
from gpucloud_nb.widgets._instances_text import (
    age_text,
    auto_delete_text,
    budget_text,
    details_html,
    gpu_text,
    idle_text,
)
from gpucloud_nb.widgets._layout import STYLE, ConfirmRow, css
from gpucloud_nb.widgets._status import StatusLine, guarded, hint, log

__all__ = ["BASE_COLUMNS", "InstancesPanel"]

#: The table's columns.
BASE_COLUMNS: tuple[str, ...] = ("name", "status", "gpu", "region", "age", "hourlyPrice", "spend",
                                 "autoDelete", "budget", "idle", "_id")
_BUSY = ("pending", "deleting")
#: Seconds between refreshes while nothing is changing state but spend and countdowns move.
LIVE_INTERVAL = 10.0


def _spend_by_id(cloud: GPUCloud) -> dict[str, float]:
    frame = cloud.spend()
    return {str(key): float(amount) for key, amount in zip(frame["_id"], frame["spend"], strict=True)}


class InstancesPanel(RefreshTicks, widgets.VBox):
    """Your instances as a table, kept fresh while something is starting or stopping.

    ``InstancesPanel(cloud, *, interval=2.0, show_deleted=False)``.

    From code: :meth:`refresh` (→ :attr:`frame`), :attr:`instances`, :meth:`select`,
    :attr:`selected`, :meth:`details`, :meth:`request_delete`, :meth:`confirm_delete`,
    :meth:`cancel_delete`, :meth:`set_auto_delete`, :meth:`cancel_auto_delete`,
    :attr:`auto_refreshing`.

    CSS classes: ``gpucloud-instances-panel`` (the panel), ``gpucloud-instances-refresh``,
    ``gpucloud-instances-show-deleted``, ``gpucloud-instances-updated``,
    ``gpucloud-instances-table`` (the HTML widget; the ``<table>`` inside has
    ``gpucloud-table``), ``gpucloud-instances-select``, ``gpucloud-instance-details-button``,
    ``gpucloud-instance-delete-button``, ``gpucloud-instance-actions`` (auto-delete controls:
    ``gpucloud-auto-delete-minutes``, ``gpucloud-auto-delete-set``, ``gpucloud-auto-delete-cancel``),
    ``gpucloud-delete-confirm`` (the confirmation row), ``gpucloud-delete-question``,
    ``gpucloud-delete-confirm-button``, ``gpucloud-delete-cancel-button``,
    ``gpucloud-instance-details``, ``gpucloud-instances-status`` (with ``gpucloud-status``, and
    ``gpucloud-error`` while it shows an error).
    """

    def __init__(self, cloud: GPUCloud, *, interval: float = 2.0, show_deleted: bool = False,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.add_class("gpucloud-instances-panel")
        self._cloud = cloud
        self.all_instances: list[Instance] = []
        self.instances: list[Instance] = []
        self.frame: pd.DataFrame = pd.DataFrame(columns=list(BASE_COLUMNS))
        self._budgets: dict[str, BudgetState] = {}
        self.pending_delete: str | None = None
        self.shown_details: InstanceDetails | None = None
        self._lock = threading.RLock()
        self._quiet = 0
        self._idle_states: dict[str, IdleState] = {}
        self._refresh_failed = False
        self.status = StatusLine("gpucloud-instances-status")
        self._fast = interval
        self._poller = Repeater(interval, self._tick, name="gpucloud-nb-instances-refresh")
        self._build_widgets(show_deleted)
        self._wire()
        try:
            self.refresh()
        except Exception:
            log.debug("The first refresh failed; the status line says why", exc_info=True)

    # ------------------------------------------------------------------ construction

    def _build_widgets(self, show_deleted: bool) -> None:
        self.refresh_button = css(widgets.Button(description="Refresh", icon="refresh",
                                                 layout=widgets.Layout(width="8em")),
                                  "gpucloud-instances-refresh")
        self.show_deleted = css(widgets.Checkbox(description="show deleted", value=show_deleted,
                                                 indent=False, layout=widgets.Layout(width="9em")),
                                "gpucloud-instances-show-deleted")
        self.updated = css(widgets.HTML(), "gpucloud-instances-updated")
        self.table = css(widgets.HTML(), "gpucloud-instances-table")
        self.table.layout.max_height = "24em"
        self.table.layout.overflow = "auto"
        self.instance_select = css(widgets.Dropdown(description="Instance", style=STYLE,
                                                    options=[("—", None)], index=0,
                                                    layout=widgets.Layout(width="36em")),
                                   "gpucloud-instances-select")
        self.details_button = css(widgets.Button(description="Details", icon="info-circle",
                                                 layout=widgets.Layout(width="8em")),
                                  "gpucloud-instance-details-button")
        self.delete_button = css(widgets.Button(description="Delete…", icon="trash",
                                                button_style="danger",
                                                layout=widgets.Layout(width="8em")),
                                 "gpucloud-instance-delete-button")
        self.auto_delete_after = css(widgets.Text(
            value="1h", description="Auto-delete in", placeholder="e.g. 1h or 30m",
            style=STYLE, layout=widgets.Layout(width="15em")), "gpucloud-auto-delete-after")
        self.auto_delete_set = css(widgets.Button(description="Set", icon="clock-o",
                                                  layout=widgets.Layout(width="auto")),
                                   "gpucloud-auto-delete-set")
        self.auto_delete_cancel = css(widgets.Button(description="Cancel auto-delete",
                                                     layout=widgets.Layout(width="auto")),
                                      "gpucloud-auto-delete-cancel")
        self.budget_dollars = css(widgets.BoundedFloatText(
            value=5, min=0.01, max=1_000_000, step=1, description="Budget ($)", style=STYLE,
            layout=widgets.Layout(width="12em")), "gpucloud-budget-dollars")
        self.budget_set = css(widgets.Button(description="Set budget", icon="money",
                                             layout=widgets.Layout(width="auto")),
                              "gpucloud-budget-set")
        self.keep_button = css(widgets.Button(description="Keep (idle clock to 0)", icon="clock-o",
                                              layout=widgets.Layout(width="auto")),
                               "gpucloud-idle-keep")
        self.actions = css(widgets.HBox(), "gpucloud-instance-actions")
        self.confirm = ConfirmRow("gpucloud-delete", "Confirm delete", "trash")
        self.question, self.confirm_box = self.confirm.question, self.confirm.box
        self.confirm_button, self.cancel_button = self.confirm.confirm_button, self.confirm.cancel_button
        self.details_view = css(widgets.HTML(), "gpucloud-instance-details")
        self.children = (
            widgets.HBox([self.refresh_button, self.show_deleted, self.updated],
                         layout=widgets.Layout(align_items="center", grid_gap="12px")),
            self.table,
            widgets.HBox([self.instance_select, self.details_button, self.delete_button,
                          self.actions], layout=widgets.Layout(flex_flow="row wrap")),
            self.confirm_box, self.status, self.details_view,
        )

    def _wire(self) -> None:
        self.refresh_button.on_click(guarded(self.status, lambda _: self.refresh()))
        self.show_deleted.observe(guarded(self.status, lambda _: self.refresh()), names="value")
        self.instance_select.observe(guarded(self.status, self._picked), names="value")
        self.details_button.on_click(guarded(self.status, lambda _: self.details()))
        self.delete_button.on_click(guarded(self.status, lambda _: self.request_delete()))
        self.confirm_button.on_click(guarded(self.status, lambda _: self.confirm_delete()))
        self.cancel_button.on_click(guarded(self.status, lambda _: self.cancel_delete()))
        self.auto_delete_set.on_click(guarded(
            self.status, lambda _: self.set_auto_delete(after=self._typed_after())))
        self.auto_delete_cancel.on_click(guarded(self.status, lambda _: self.cancel_auto_delete()))
        self.budget_set.on_click(guarded(
            self.status, lambda _: self.set_budget(dollars=self.budget_dollars.value)))
        self.keep_button.on_click(guarded(self.status, lambda _: self.keep()))

    # ------------------------------------------------------------------ auto-delete

    def _auto_delete_text(self, instance: Instance) -> str:
        return auto_delete_text(self._cloud.auto_delete, instance)

    def _typed_after(self) -> float:
        try:
            return parse_duration(self.auto_delete_after.value, "Auto-delete in")
        except ValueError as bad:
            raise InvalidInputError(str(bad)) from None

    def set_auto_delete(self, instance_id: str | None = None, *,
                        after: float | timedelta) -> str:
        """Delete an instance (default: the selected one) ``after`` seconds (or a ``timedelta``)
        from now; replaces any earlier timer. Returns the sentence shown."""
        instance = self._require(instance_id, "time")
        if instance.status in ("deleting", "deleted"):
            raise InvalidInputError(f"{instance.name} is already {instance.status}.")
        when = self._cloud.auto_delete.schedule(instance.id, after)
        self.refresh()
        message = (f"{instance.name} will be deleted at {when.astimezone():%H:%M:%S} by the "
                   f"{self._cloud.auto_delete.where}, even if this kernel stops.")
        self.status.success(message)
        return message

    def cancel_auto_delete(self, instance_id: str | None = None) -> str:
        """Stop the auto-delete timer of an instance (default: the selected one); it keeps running."""
        instance = self._require(instance_id, "keep")
        if not self._cloud.auto_delete.cancel(instance.id):
            raise InvalidInputError(f"{instance.name} has no auto-delete timer.")
        self.refresh()
        message = f"Auto-delete of {instance.name} cancelled; it keeps running (and billing)."
        self.status.success(message)
        return message

    # ------------------------------------------------------------------ budget

    def _budget_text(self, instance: Instance) -> str:
        return budget_text(self._cloud.budgets.failures, self._budgets.get(instance.id), instance)

    def set_budget(self, instance_id: str | None = None, *, dollars: float) -> str:
        """Delete an instance (default: the selected one) once it has cost ``dollars``;
        replaces an earlier budget. Returns the sentence shown."""
        instance = self._require(instance_id, "give a budget")
        if instance.status in ("deleting", "deleted"):
            raise InvalidInputError(f"{instance.name} is already {instance.status}.")
        self._cloud.budgets.set(instance.id, dollars)
        self.refresh()
        message = (f"{instance.name} will be deleted once it has cost {money(dollars)}, "
                   f"by the {self._cloud.budgets.where}, even if this kernel stops.")
        self.status.success(message)
        return message

    # ------------------------------------------------------------------ idle

    def _idle_text(self, instance: Instance) -> str:
        return idle_text(self._idle_states.get(instance.id), instance)

    def keep(self, instance_id: str | None = None) -> str:
        """Start the idle clock of an instance (default: the selected one) again: the Keep button.

        Returns the sentence shown.
        """
        instance = self._require(instance_id, "keep")
        if instance.id not in self._idle_states and not self._idle_text(instance):
            raise InvalidInputError(f"{instance.name} is not deleted when idle.")
        self._cloud.idle_delete.keep(instance.id)
        self.refresh()
        message = f"{instance.name} kept: its idle clock starts again."
        self.status.success(message)
        return message

    def _render_actions(self) -> None:
        instance = self.selected
        live = instance is not None and instance.status not in ("deleting", "deleted")
        timed = instance is not None and live \
            and self._cloud.auto_delete.remaining(instance.id) is not None
        self.auto_delete_set.description = "Extend to this" if timed else "Set auto-delete"
        controls = [self.auto_delete_after, self.auto_delete_set] if live else []
        if timed:
            controls.append(self.auto_delete_cancel)
        if live:
            controls += [self.budget_dollars, self.budget_set]
        if live and instance is not None and self._idle_text(instance):
            controls.append(self.keep_button)
        self.actions.children = tuple(controls)

    # ------------------------------------------------------------------ data

    @property
    def auto_refreshing(self) -> bool:
        """True while the panel refreshes itself (something is pending or deleting)."""
        return self._poller.running

    def refresh(self) -> pd.DataFrame:
        """List the instances again and redraw; returns :attr:`frame`."""
        with self._lock:
            try:
                return self._refresh()
            except Exception as error:  # whatever failed, the status line says so
                self.status.error(error)
                self._refresh_failed = True
                raise

    def _refresh(self) -> pd.DataFrame:
        with self._lock:
            listed = list(self._cloud.instances.list())
            now = datetime.now(timezone.utc)
            spend = _spend_by_id(self._cloud)
            self._budgets = self._cloud.budgets.states()
            self._idle_states = self._cloud.idle_delete.states()
            listed.sort(key=lambda i: i.created_at or now, reverse=True)
            self.all_instances = listed
            self.instances = [i for i in listed
                              if self.show_deleted.value or i.status != "deleted"]
            self.frame = self._build_frame(self.instances, spend, now)
            self._render()
            self._sync_details()
            timers = [r for r in map(self._cloud.auto_delete.remaining,
                                     [i.id for i in listed]) if r is not None]
            busy = [i for i in listed if i.status in _BUSY]
            live = [i for i in listed if i.status == "active"] or timers
            interval = min([LIVE_INTERVAL, *(r + 0.5 for r in timers)])  # see a timer fire
            if busy or live:
                self._poller.start(self._fast if busy else max(self._fast, interval))
            else:
                self._poller.stop()
            stamp = now.astimezone().strftime("%H:%M:%S")
            if busy:
                n = len(busy)
                auto = (f" · refreshing every {self._poller.interval:g} s while {n} "
                        f"instance{'s' if n != 1 else ''} {'are' if n != 1 else 'is'} "
                        "pending or deleting")
            elif live:
                auto = (f" · refreshing every {self._poller.interval:g} s while instances bill "
                        "or auto-delete timers run")
            else:
                auto = ""
            self.updated.value = hint(f"updated {stamp}{escape(auto)}")
            failed = self._timer_failures(listed)
            gateway = self._cloud.gateway_status()
            note = "" if gateway is None else gateway.sentence()
            if failed:
                self.status.error(failed)
                self._refresh_failed = True
            elif note:  # the class gateway's 80 % warning, or what it deleted at 100 %
                self.status.warning(note)
                self._refresh_failed = True  # cleared once the note is gone
            elif self._refresh_failed:
                self._refresh_failed = False
                self.status.clear()
            return self.frame

    def _timer_failures(self, listed: Sequence[Instance]) -> str:
        """One sentence about budget deletes that failed for instances still not deleted."""
        over = self._cloud.budgets.failures
        spent = [i for i in listed if i.id in over and i.status not in ("deleting", "deleted")]
        return over[spent[0].id] if spent else ""

    def _build_frame(self, instances: Sequence[Instance], spend: Mapping[str, float],
                     now: datetime) -> pd.DataFrame:
        rows = []
        for instance in instances:
            created = instance.created_at
            rows.append({
                "name": instance.name, "status": instance.status, "gpu": gpu_text(instance),
                "region": instance.region_id,
                "age": pd.Timedelta(now - created) if created else pd.NaT,
                "hourlyPrice": instance.hourly_price, "spend": spend.get(instance.id, 0.0),
                "autoDelete": self._auto_delete_text(instance),
                "budget": self._budget_text(instance), "idle": self._idle_text(instance),
                "_id": instance.id,
            })
        return pd.DataFrame(rows, columns=list(BASE_COLUMNS))

    def _render(self) -> None:
        if self.frame.empty:
            hidden = len(self.all_instances) - len(self.instances)
            note = f" ({hidden} deleted hidden)" if hidden else ""
            self.table.value = f"<i>No instances{escape(note)}.</i>"
        else:
            self.table.value = frame_html(self.frame, price_columns=("hourlyPrice", "spend"),
                                          formatters={"age": age_text})
        options: list[tuple[str, Any]] = [("—", None)]
        options += [(f"{i.name} · {i.status} · {per_hour(i.hourly_price)} ({i.id})", i.id)
                    for i in self.instances]
        self._quiet += 1
        try:
            set_options(self.instance_select, options, None)
        finally:
            self._quiet -= 1
        self._render_actions()

    def _sync_details(self) -> None:
        """Re-read the details on show when that instance's status changed."""
        shown = self.shown_details
        if shown is None:
            return
        now = next((i for i in self.all_instances if i.id == shown.id), None)
        if now is not None and now.status != shown.status:
            try:
                self.details(shown.id)
            except Exception:
                log.debug("Could not refresh the instance details", exc_info=True)

    # ------------------------------------------------------------------ selection and details

    @property
    def selected(self) -> Instance | None:
        """The instance chosen in the dropdown, if any."""
        return self._find(self.instance_select.value) if self.instance_select.value else None

    def _find(self, instance_id: str) -> Instance | None:
        return next((i for i in self.all_instances if i.id == instance_id), None)

    def _require(self, instance_id: str | None, action: str) -> Instance:
        instance_id = instance_id or self.instance_select.value
        if not instance_id:
            raise InvalidInputError(f"Choose an instance to {action} first.")
        instance = self._find(instance_id)
        if instance is None:
            raise InvalidInputError(f"There is no instance {instance_id} in this list; "
                                    "refresh and try again.")
        return instance

    def _picked(self, change: Mapping[str, Any]) -> None:
        if self._quiet:
            return
        self._render_actions()
        if self.pending_delete and self.pending_delete != change.get("new"):
            self.cancel_delete()
        if change.get("new"):
            self.details(change["new"])

    def select(self, instance_id: str) -> Instance:
        """Choose an instance (and show its details); returns it."""
        try:
            instance = self._require(instance_id, "select")
            if instance.id not in [v for _, v in self.instance_select.options]:
                self.show_deleted.value = True  # a deleted one: show the deleted too
            self.instance_select.value = instance.id
        except Exception as error:
            self.status.error(error)
            raise
        return instance

    def details(self, instance_id: str | None = None) -> InstanceDetails:
        """Read one instance in full (default: the selected one) and show it; returns it."""
        try:
            instance_id = instance_id or self.instance_select.value
            if not instance_id:
                raise InvalidInputError("Choose an instance to see its details first.")
            details = self._cloud.instances.get(instance_id)
        except Exception as error:
            self.status.error(error)
            raise
        self.shown_details = details
        ssh, used = self._ssh(details)
        self.details_view.value = self._details_html(details, ssh, used)
        return details

    def _ssh(self, details: InstanceDetails) -> tuple[str | None, str | None]:
        """The working ssh command and the key it logs in with; a failure is its sentence."""
        if details.status != "active" or not details.ip:
            return None, None
        try:
            command = self._cloud.instances.ssh_command(details.id, wait=0)
        except GPUCloudError as error:
            return str(error), None
        return command, self._cloud.instances.ssh_key_in_use(details.id)

    _details_html = staticmethod(details_html)

    # ------------------------------------------------------------------ delete

    def request_delete(self, instance_id: str | None = None) -> str:
        """Ask to delete an instance (default: the selected one); returns the question shown."""
        try:
            instance = self._require(instance_id, "delete")
            if instance.status in ("deleting", "deleted"):
                raise InvalidInputError(f"{instance.name} is already {instance.status}.")
        except Exception as error:
            self.status.error(error)
            raise
        fate = instance.data_fate(self._cloud.volumes.list())
        question = f"Delete {instance.name}? {fate[0].upper()}{fate[1:]}."
        self.pending_delete = instance.id
        self.confirm.ask(question)
        self.status.clear()
        return question

    def confirm_delete(self) -> str:
        """Delete the instance asked about in :meth:`request_delete`; returns its id."""
        instance_id = self.pending_delete
        try:
            if instance_id is None:
                raise InvalidInputError("Nothing to confirm: ask to delete an instance first.")
            instance = self._find(instance_id)
            name = instance.name if instance else instance_id
            fate = instance.data_fate(self._cloud.volumes.list()) if instance else ""
            self._cloud.instances.delete(instance_id)
        except Exception as error:
            self.status.error(error)
            raise
        self.pending_delete = None
        self.confirm.hide()
        self.refresh()
        self.status.success(f"Deleting {name}; {fate}." if fate else f"Deleting {name}.")
        return instance_id

    def cancel_delete(self) -> None:
        """Forget the delete question; nothing is deleted."""
        instance = self._find(self.pending_delete) if self.pending_delete else None
        self.pending_delete = None
        self.confirm.hide()
        if instance is not None:
            self.status.info(f"Kept {instance.name}.")

    # ------------------------------------------------------------------ lifetime

    def close(self) -> None:
        """Stop refreshing and close the panel."""
        self._poller.close()
        super().close()

    def __repr__(self) -> str:
        return f"<InstancesPanel {len(self.instances)} instances>"
