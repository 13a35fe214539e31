"""``ClassPanel``: the teacher's view of a class gateway, stopping a student or all.

    >>> teacher = GPUCloud(api_key=TEACHER_KEY, base_url="http://127.0.0.1:8790")  # doctest: +SKIP
    >>> panel = ClassPanel(teacher)  # doctest: +SKIP
    >>> panel.request_stop(panel.rows[0].account)   # "Stop all 2 instances of Ada? ..."  # doctest: +SKIP
    >>> panel.confirm_stop()                        # or panel.cancel_stop()  # doctest: +SKIP
    >>> panel.save_csv("class.csv")  # doctest: +SKIP

Choices, written down once:

- One row per student account (the order of the keys file): instances not yet deleted, dollars
  per hour billing now, spend so far, budget (``/day``, ``/week`` when it starts again) and what
  is left; minutes idle when the gateway reports them; a "deletes not done" column while the
  cloud has taken a delete and not done it (the gateway retries). All of it comes through
  :class:`~gpucloud_nb.client.teacher.ClassView`. A budget under 20 % left shows in the theme's
  warning colour, a spent one in its error colour; every colour is a JupyterLab theme variable.
- Stopping asks first, for one student as for the whole class; only :meth:`ClassPanel.confirm_stop`
  (or its button) deletes. "Set budget" changes the chosen student's budget at once (a class
  gateway keeps it over restarts).
- The view refreshes every ``interval`` seconds (10) in a daemon thread while any student has an
  instance, and stops after three failed refreshes in a row; ``refresh()`` works at any time.
- "Export CSV" writes ``class-<date>-<time>.csv`` in the working directory (``csv()`` returns
  the text); it holds no key.
"""

from __future__ import annotations

import threading
from datetime import datetime
from pathlib import Path
from typing import Any

import ipywidgets as widgets

from gpucloud_nb.client.management import GPUCloud
from gpucloud_nb.client.teacher import AccountUse
from gpucloud_nb.errors import InvalidInputError
from gpucloud_nb.widgets._background import RefreshTicks, Repeater
from gpucloud_nb.widgets._dropdowns import set_options
from gpucloud_nb.widgets._format import escape, money
from gpucloud_nb.widgets._layout import STYLE, ConfirmRow, css
from gpucloud_nb.widgets._status import ERROR, WARNING, StatusLine, guarded, hint, log

__all__ = ["ClassPanel"]

_LOW = 0.2
_HEADERS = ("student", "instances", "$/h now", "spend", "budget", "left", "idle min")
_CELL = "padding:2px 8px;line-height:1.4;white-space:nowrap"


def _left_html(row: AccountUse) -> str:
    if row.left is None or row.budget is None:
        return ""
    text = escape(money(row.left))
    if row.left <= 0:
        return f'<b style="color:{ERROR}">{text} (spent)</b>'
    if row.left < _LOW * row.budget:
        return f'<span style="color:{WARNING}">{text}</span>'
    return text


def _table(rows: list[AccountUse]) -> str:
    idle = any(row.idle_minutes is not None for row in rows)
    stuck = any(row.unconfirmed_deletes for row in rows)
    headers = [name for name in _HEADERS if name != "idle min" or idle]
    if stuck:
        headers.append("deletes not done")
    head = "".join(f'<th style="{_CELL};text-align:left;border-bottom:1px solid '
                   f'var(--jp-border-color2)">{escape(name)}</th>' for name in headers)
    body = []
    grouped = any(row.group for row in rows)  # a hub's gateway: one heading per hub group
    for number, row in enumerate(rows):
        if grouped and (number == 0 or rows[number - 1].group != row.group):
            body.append(f'<tr><th colspan="{len(headers)}" style="{_CELL};text-align:left;'
                        f'font-style:italic">{escape(row.group or "no group")}</th></tr>')
        budget = money(row.budget) + (f"/{row.period}" if row.period and row.budget is not None
                                      else "")
        cells = [escape(row.name), str(row.instances), escape(money(row.per_hour)),
                 escape(money(row.spend)), escape(budget), _left_html(row)]
        if idle:
            cells.append("" if row.idle_minutes is None else f"{row.idle_minutes:g}")
        if stuck:
            cells.append(f'<b style="color:{ERROR}">{row.unconfirmed_deletes} (retrying)</b>'
                         if row.unconfirmed_deletes else "")
        body.append("<tr>" + "".join(f'<td style="{_CELL}">{cell}</td>' for cell in cells)
                    + "</tr>")
    total = ["total", str(sum(r.instances for r in rows)),
             escape(money(sum(r.per_hour for r in rows))),
             escape(money(sum(r.spend for r in rows)))] + [""] * (len(headers) - 4)
    foot = "".join(f'<td style="{_CELL};font-weight:bold;border-top:1px solid '
                   f'var(--jp-border-color2)">{text}</td>' for text in total)
    return (f'<table class="gpucloud-table gpucloud-class-table" style="border-collapse:collapse;'
            f'font-size:0.9em"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody>'
            f'<tfoot><tr>{foot}</tr></tfoot></table>')


class ClassPanel(RefreshTicks, widgets.VBox):
    """Every student's use of a class gateway, with stop buttons that ask first.

    ``ClassPanel(cloud, *, interval=10.0)``, ``cloud`` holding the teacher's key.

    From code: :meth:`refresh` (→ :attr:`rows`), :meth:`request_stop`, :meth:`confirm_stop`,
    :meth:`cancel_stop`, :meth:`set_budget`, :meth:`csv`, :meth:`save_csv`,
    :attr:`auto_refreshing`.

    CSS classes: ``gpucloud-class-panel`` (the panel), ``gpucloud-class-refresh``,
    ``gpucloud-class-updated``, ``gpucloud-class-table`` (the HTML widget and the ``<table>``),
    ``gpucloud-class-student`` (the dropdown), ``gpucloud-class-stop-student``,
    ``gpucloud-class-stop-all``, ``gpucloud-class-budget`` (the budget text),
    ``gpucloud-class-set-budget``, ``gpucloud-class-export``, ``gpucloud-class-confirm`` (the
    confirmation row), ``gpucloud-class-question``, ``gpucloud-class-confirm-button``,
    ``gpucloud-class-cancel-button``, ``gpucloud-class-status`` (with ``gpucloud-status``, and
    ``gpucloud-error`` while it shows an error).
    """

    def __init__(self, cloud: GPUCloud, *, interval: float = 10.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.add_class("gpucloud-class-panel")
        self._view = cloud.class_view
        self.rows: list[AccountUse] = []
        self.pending_stop: str | None = None  # an account id, or "" for the whole class
        self._lock = threading.RLock()
        self.status = StatusLine("gpucloud-class-status")
        self._poller = Repeater(interval, self._tick, name="gpucloud-nb-class-refresh")
        self._build()
        try:
            self.refresh()
        except Exception:
            log.debug("The first refresh failed; the status line says why", exc_info=True)

    def _build(self) -> None:
        self.refresh_button = css(widgets.Button(description="Refresh", icon="refresh",
                                                 layout=widgets.Layout(width="8em")),
                                  "gpucloud-class-refresh")
        self.export_button = css(widgets.Button(description="Export CSV", icon="download",
                                                layout=widgets.Layout(width="10em")),
                                 "gpucloud-class-export")
        self.updated = css(widgets.HTML(), "gpucloud-class-updated")
        self.table = css(widgets.HTML(), "gpucloud-class-table")
        self.table.layout.max_height = "30em"
        self.table.layout.overflow = "auto"
        self.student = css(widgets.Dropdown(description="Student", style=STYLE,
                                            options=[("—", None)], index=0,
                                            layout=widgets.Layout(width="24em")),
                           "gpucloud-class-student")
        self.stop_student_button = css(widgets.Button(
            description="Stop all of this student…", icon="stop", button_style="danger",
            layout=widgets.Layout(width="auto")), "gpucloud-class-stop-student")
        self.stop_all_button = css(widgets.Button(
            description="Stop the whole class…", icon="stop-circle", button_style="danger",
            layout=widgets.Layout(width="auto")), "gpucloud-class-stop-all")
        self.budget = css(widgets.Text(placeholder="20, 20/day, - for none",
                                       layout=widgets.Layout(width="12em")),
                          "gpucloud-class-budget")
        self.set_budget_button = css(widgets.Button(description="Set budget", icon="dollar",
                                                    layout=widgets.Layout(width="auto")),
                                     "gpucloud-class-set-budget")
        self.confirm = ConfirmRow("gpucloud-class", "Confirm stop", "stop")
        self.question, self.confirm_box = self.confirm.question, self.confirm.box
        self.confirm_button, self.cancel_button = self.confirm.confirm_button, self.confirm.cancel_button
        self.children = (
            widgets.HBox([self.refresh_button, self.export_button, self.updated],
                         layout=widgets.Layout(align_items="center", grid_gap="12px")),
            self.table,
            widgets.HBox([self.student, self.stop_student_button, self.stop_all_button,
                          self.budget, self.set_budget_button],
                         layout=widgets.Layout(flex_flow="row wrap", grid_gap="8px")),
            self.confirm_box, self.status,
        )
        self.refresh_button.on_click(guarded(self.status, lambda _: self.refresh()))
        self.export_button.on_click(guarded(self.status, lambda _: self.save_csv()))
        self.stop_student_button.on_click(guarded(self.status, lambda _: self.request_stop(
            self._chosen())))
        self.stop_all_button.on_click(guarded(self.status, lambda _: self.request_stop(None)))
        self.set_budget_button.on_click(guarded(self.status, lambda _: self.set_budget(
            self._chosen(), self.budget.value)))
        self.confirm_button.on_click(guarded(self.status, lambda _: self.confirm_stop()))
        self.cancel_button.on_click(guarded(self.status, lambda _: self.cancel_stop()))

    # ------------------------------------------------------------------ data

    @property
    def auto_refreshing(self) -> bool:
        """True while the panel refreshes itself (some student has an instance)."""
        return self._poller.running

    def refresh(self) -> list[AccountUse]:
        """Read the class again and redraw; returns :attr:`rows`."""
        with self._lock:
            try:
                rows = self._view.accounts()
            except Exception as error:
                self.status.error(error)
                raise
            self.rows = rows
            self.table.value = _table(rows) if rows else "<i>No student accounts.</i>"
            chosen = self.student.value
            set_options(self.student, [("—", None)] + [
                (f"{row.name} · {row.instances} instance{'s' if row.instances != 1 else ''}",
                 row.account) for row in rows],
                chosen if any(row.account == chosen for row in rows) else None)
            if any(row.instances for row in rows):
                self._poller.start()
            else:
                self._poller.stop()
            stamp = datetime.now().strftime("%H:%M:%S")
            auto = f" · refreshing every {self._poller.interval:g} s" if self.auto_refreshing \
                else ""
            self.updated.value = hint(escape(f"updated {stamp}{auto}"))
            return rows

    def _chosen(self) -> str:
        if not self.student.value:
            raise InvalidInputError("Choose a student first.")
        return str(self.student.value)

    def _row(self, account: str) -> AccountUse:
        row = next((row for row in self.rows if row.account == account), None)
        if row is None:
            raise InvalidInputError(f"There is no student {account} in this list; refresh and "
                                    "try again.")
        return row

    # ------------------------------------------------------------------ stop

    def request_stop(self, account: str | None = None) -> str:
        """Ask to stop every instance of ``account`` (``None``: of the whole class); the question."""
        try:
            if account is None:
                count = sum(row.instances for row in self.rows)
                students = sum(1 for row in self.rows if row.instances)
                if not count:
                    raise InvalidInputError("No student has an instance to stop.")
                question = (f"Stop the whole class: {count} instance{'s' if count != 1 else ''} "
                            f"of {students} student{'s' if students != 1 else ''}? Data not on "
                            "a volume is lost.")
            else:
                row = self._row(account)
                if not row.instances:
                    raise InvalidInputError(f"{row.name} has no instance to stop.")
                question = (f"Stop all {row.instances} instance{'s' if row.instances != 1 else ''}"
                            f" of {row.name}? Data not on a volume is lost.")
        except Exception as error:
            self.status.error(error)
            raise
        self.pending_stop = "" if account is None else account
        self.confirm.ask(question)
        self.status.clear()
        return question

    def confirm_stop(self) -> list[str]:
        """Stop what :meth:`request_stop` asked about; returns the instance ids deleted."""
        pending = self.pending_stop
        try:
            if pending is None:
                raise InvalidInputError("Nothing to confirm: ask to stop a student or the class "
                                        "first.")
            who = "the whole class" if pending == "" else self._row(pending).name
            deleted = self._view.stop_class() if pending == "" else self._view.stop_student(pending)
        except Exception as error:
            self.status.error(error)
            raise
        self.pending_stop = None
        self.confirm.hide()
        self.refresh()
        self.status.success(f"Stopping {len(deleted)} instance{'s' if len(deleted) != 1 else ''} "
                            f"of {who}.")
        return deleted

    def cancel_stop(self) -> None:
        """Forget the stop question; nothing is stopped."""
        self.pending_stop = None
        self.confirm.hide()
        self.status.info("Nothing was stopped.")

    # ------------------------------------------------------------------ budget

    def set_budget(self, account: str, budget: float | str | None) -> AccountUse:
        """Change ``account``'s budget now (a class gateway only): dollars, ``None`` or ``"-"``
        for none, ``"20/day"``, ``"20/week"``; redraws and returns the student's new row."""
        try:
            if isinstance(budget, str):
                budget = budget.strip()
                if not budget:
                    raise InvalidInputError("Type a budget first: dollars, 20/day, 20/week or - "
                                            "for none.")
            row = self._view.set_budget(account, budget)
        except Exception as error:
            self.status.error(error)
            raise
        self.refresh()
        self.status.success(f"{row.name}'s budget is now "
                            f"{'none' if row.budget is None else money(row.budget)}"
                            f"{'/' + row.period if row.period else ''}.")
        return row

    # ------------------------------------------------------------------ export

    def csv(self) -> str:
        """The rows on screen as CSV text (keys masked)."""
        return self._view.csv(self.rows)

    def save_csv(self, path: str | Path | None = None) -> Path:
        """Write :meth:`csv` to ``path`` (default ``class-<date>-<time>.csv`` here); the path."""
        target = Path(path) if path is not None else Path(
            f"class-{datetime.now():%Y%m%d-%H%M%S}.csv")
        target.write_text(self.csv(), encoding="utf-8")
        self.status.success(f"Saved {len(self.rows)} students to {target}.")
        return target

    # ------------------------------------------------------------------ lifetime

    def close(self) -> None:
        """Stop refreshing and close the panel."""
        self._poller.close()
        super().close()

    def __repr__(self) -> str:
        return f"<ClassPanel {len(self.rows)} students>"
