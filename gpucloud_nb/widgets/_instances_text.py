"""What the instances panel shows, as text: its table's cells and an instance's details.

Pure functions of records, states and the client's watchers, so the words a person reads are
tested without a widget; every value from the cloud is HTML-escaped where it becomes HTML.

    >>> gpu_text(Instance(gpu_model="H100", gpu_count=2))
    'H100 ×2'
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from gpucloud_nb.client.autodelete import ServiceAutoDelete, UnkeptAutoDelete
from gpucloud_nb.client.budgets import BudgetState
from gpucloud_nb.client.idle import IdleState
from gpucloud_nb.display import format_duration
from gpucloud_nb.models import Instance, InstanceDetails
from gpucloud_nb.widgets._format import escape, money, per_day, per_hour

__all__ = ["age_text", "auto_delete_text", "budget_text", "code", "details_html", "gpu_text",
           "idle_text", "volume_text"]


def gpu_text(instance: Instance) -> str:
    """The GPU column: model and count."""
    return f"{instance.gpu_model} ×{instance.gpu_count}" if instance.gpu_model else ""


def age_text(value: Any) -> str:
    """The age column: a duration, or nothing when there is none."""
    try:
        if value is None or pd.isna(value):
            return ""
        return format_duration(pd.Timedelta(value).total_seconds())
    except (TypeError, ValueError):
        return ""


def volume_text(item: Any) -> str:
    """One item of an instance's ``volumes`` (no documented shape) as a line of text."""
    if isinstance(item, list | tuple):
        return " at ".join(str(part) for part in item)
    if isinstance(item, Mapping):
        return ", ".join(f"{k}: {v}" for k, v in item.items())
    return str(item)


def code(html: str) -> str:
    """``html`` in a ``<code>`` element."""
    return f"<code>{html}</code>"


def auto_delete_text(timers: UnkeptAutoDelete | ServiceAutoDelete, instance: Instance) -> str:
    """The auto-delete column: the countdown and who keeps it."""
    remaining = timers.remaining(instance.id)
    if remaining is None:
        return ""
    return f"in {format_duration(remaining)} ({timers.where})"


def budget_text(failures: Mapping[str, str], state: BudgetState | None, instance: Instance) -> str:
    """The budget column: spend of the budget (⚠ from 80 %), or "failed"."""
    if instance.id in failures:
        return "failed"
    if state is None:
        return ""
    text = f"{money(state.spend)} of {money(state.dollars)}"
    return f"⚠ {text}" if state.warning else text


def idle_text(state: IdleState | None, instance: Instance) -> str:
    """The idle column (see the panel's module docstring for what it says when)."""
    if instance.status in ("deleting", "deleted"):
        return ""
    if state is not None:
        idle, limit = format_duration(state.idle), format_duration(state.limit)
        if state.warning:
            return f"idle {idle}, deletes in {format_duration(state.deletes_in)}"
        return f"idle {idle} of {limit}" if state.idle >= state.limit / 2 else f"after {limit} idle"
    return ""


def details_html(d: InstanceDetails, ssh: str | None, used: str | None) -> str:
    """One instance in full as an HTML table; ``ssh`` is the working command (or why there is
    none), ``used`` the key it logs in with."""
    named = d.ssh_key.get("name") or d.ssh_key.get("_id") if d.ssh_key else ""
    key = f"{used} (the cloud calls it {named})" if used and named else used or named
    software = d.os
    if d.docker_image:
        command = f" ({d.docker_command})" if d.docker_command else ""
        software = f"container {d.docker_image}{command}"
    rows: list[tuple[str, str]] = [
        ("Name", d.name), ("Id", d.id), ("Status", d.status),
        ("Provider", d.provider), ("Region", d.region_id),
        ("GPU", f"{d.gpu_model} ×{d.gpu_count}, {d.vram_per_gpu:g} GB each"
                + (", NVLink" if d.nvlink else "")),
        ("CPU / RAM / disk", f"{d.vcpus:g} vCPU · {d.ram:g} GB RAM · {d.storage:g} GB storage"),
        ("Interconnect", d.interconnect),
        ("Software", software),
        ("Price", f"{per_hour(d.hourly_price)} ({per_day(d.hourly_price)})"),
        ("IP", d.ip or "none yet"),
        ("SSH", ssh or "available once active"),
        ("Port forwards", ", ".join(map(str, d.port_forwards)) or "none"),
        ("Volumes", "; ".join(volume_text(v) for v in d.volumes) or "none"),
        ("SSH key", str(key or "none")),
        ("Created", d.created_at.astimezone().strftime("%Y-%m-%d %H:%M:%S")
         if d.created_at else ""),
    ]
    if d.deleted_at:
        rows.append(("Deleted", d.deleted_at.astimezone().strftime("%Y-%m-%d %H:%M:%S")))
    cells = "".join(
        f'<tr><th style="text-align:left;padding:1px 12px 1px 0;white-space:nowrap">'
        f"{escape(k)}</th>"
        f"<td>{code(escape(v)) if k == 'SSH' and v.startswith('ssh ') else escape(v)}</td></tr>"
        for k, v in rows)
    # Lines of text, not of widgets: ipywidgets gives HTML its 28 px control height.
    return f'<table class="gpucloud-details-table" style="line-height:1.5">{cells}</table>'
