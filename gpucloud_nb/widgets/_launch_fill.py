"""The launch form filled from code: each field by name, with values the form does not offer
kept and explained by :attr:`~gpucloud_nb.widgets.LaunchForm.problem`. :class:`FillFromCode` is
the part of :class:`~gpucloud_nb.widgets.LaunchForm` that does this.

    >>> form.fill(name="train-1", os="ubuntu-22.04", delete_after=3600)  # doctest: +SKIP
    >>> form.auto_delete.value  # doctest: +SKIP
    '1h'
"""

from __future__ import annotations

import contextlib
from datetime import timedelta
from typing import Any, TypeVar

from gpucloud_nb.durations import duration_text
from gpucloud_nb.errors import InvalidInputError
from gpucloud_nb.launch_model import as_offer, offer_label, script_text
from gpucloud_nb.rules import find_offer
from gpucloud_nb.widgets._dropdowns import choose
from gpucloud_nb.widgets._launch_volumes import VolumeShortcut

__all__ = ["FILL_KEYS", "FillFromCode"]

FILL_KEYS = ("offer", "name", "region", "os", "image", "cloud_init", "volume_id", "ssh_key",
             "ssh_key_id", "delete_after", "budget", "delete_when_idle")


_Form = TypeVar("_Form", bound="FillFromCode")


class FillFromCode(VolumeShortcut):
    """The launch form's :meth:`fill` (see the module)."""

    def _quietly(self) -> contextlib.AbstractContextManager[None]:
        raise NotImplementedError  # the form's

    def fill(self: _Form, **values: Any) -> _Form:
        """Set fields by name: ``offer``, ``name``, ``region``, ``os``, ``image``, ``cloud_init``,
        ``volume_id``, ``ssh_key``, ``ssh_key_id``, ``delete_after``, ``budget`` (dollars),
        ``delete_when_idle``; returns the form. A duration is what the field takes (``"1h30m"``,
        :mod:`gpucloud_nb.durations`), or seconds or a ``timedelta`` as in the API.

        Values the form does not offer are kept and explained by :attr:`problem`.
        """
        unknown = sorted(set(values) - set(FILL_KEYS))
        if unknown:
            raise TypeError(f"fill() got unknown field(s) {', '.join(unknown)}; "
                            f"use: {', '.join(FILL_KEYS)}.")
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
                self.cloud_init.value = script_text(values["cloud_init"])
            if "volume_id" in values:
                choose(self.volume, values["volume_id"], "{} (not found here)")
            if "ssh_key" in values:
                self.ssh_key.value = values["ssh_key"] or ""
            if "ssh_key_id" in values:
                self.ssh_key_id.value = values["ssh_key_id"] or ""
            if "delete_after" in values:
                self.auto_delete.value = _typed(values["delete_after"])
            if "budget" in values:
                self.budget.value = values["budget"] or 0
            if "delete_when_idle" in values:
                self.idle_delete.value = _typed(values["delete_when_idle"])
        self._sync()
        return self

    def _fill_offer(self, offer: Any) -> None:
        if isinstance(offer, str):
            listed = [v for _, v in self.offer.options if v is not None]
            if not any(v.instance_id == offer for v in listed):
                raise InvalidInputError(f"This form offers no offer with instanceId '{offer}'.")
            offer = find_offer(listed, offer)
        offer = None if offer is None else as_offer(offer)
        if offer not in [v for _, v in self.offer.options]:
            self.offer.options = [*self.offer.options, (offer_label(offer), offer)]
        self.offer.value = offer


def _typed(value: str | float | timedelta | None) -> str:
    """A duration given to :meth:`LaunchForm.fill` as its field shows it."""
    if value is None or isinstance(value, str):
        return value or ""
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if seconds == 0:
        return ""  # never, as 0 dollars is no budget
    return duration_text(seconds) if seconds > 0 else f"{seconds:g}s"  # problem names it
