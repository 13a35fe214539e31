"""The launch form's volumes: the volumes it may attach (the offer's provider and region), and
the "New volume…" shortcut that creates one there and selects it.

    >>> form.create_volume("data", 100)   # the shortcut's fields, then create and select  # doctest: +SKIP
    >>> form.volume_problem                # None, or why the shortcut cannot create  # doctest: +SKIP

:class:`VolumeShortcut` is the part of :class:`~gpucloud_nb.widgets.LaunchForm` that does this;
the form keeps the lists (``_volumes``, ``_volume_offers``) and calls :meth:`_rebuild_volumes`
when the offer or region changes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpucloud_nb.errors import InvalidInputError
from gpucloud_nb.launch_model import usable_volumes, volume_offer_for, volume_problem
from gpucloud_nb.models import Volume, VolumeOffer
from gpucloud_nb.widgets._dropdowns import set_options
from gpucloud_nb.widgets._format import escape
from gpucloud_nb.widgets._launch_fields import LaunchFields
from gpucloud_nb.widgets._launch_text import volume_info_html
from gpucloud_nb.widgets._layout import show
from gpucloud_nb.widgets._status import WARNING, hint

if TYPE_CHECKING:
    from gpucloud_nb.client.management import GPUCloud
    from gpucloud_nb.models import InstanceOffer

__all__ = ["VolumeShortcut"]


class VolumeShortcut(LaunchFields):
    """The launch form's volume dropdown and its "New volume…" shortcut (see the module)."""

    _cloud: GPUCloud
    _volumes: list[Volume]
    _volume_offers: list[VolumeOffer]

    @property
    def _offer(self) -> InstanceOffer | None:
        return self.offer.value

    def _sync(self, *, volumes: bool = False) -> None:
        raise NotImplementedError  # the form's

    def _update(self) -> None:
        raise NotImplementedError  # the form's

    def _volume_offer(self) -> VolumeOffer | None:
        return volume_offer_for(self._offer, self._volume_offers)

    def _usable_volumes(self) -> list[Volume]:
        return usable_volumes(self._offer, self.region.value, self._volumes)

    def _rebuild_volumes(self) -> None:
        options = [("none", None)] + [(f"{v.name} ({v.size_in_gb:g} GB)", v.id)
                                      for v in self._usable_volumes()]
        set_options(self.volume, options, None)
        volume_offer = self._volume_offer()
        if volume_offer is not None and self.volume_size.value < volume_offer.min_size_in_gb:
            self.volume_size.value = int(-(-volume_offer.min_size_in_gb // 1))

    def _toggle_volume_create(self) -> None:
        visible = self.volume_create_box.layout.display == "none"
        show(self.volume_create_box, visible)
        self.volume_create_toggle.description = "Hide" if visible else "New volume…"
        self._update_volume_create()

    @property
    def volume_problem(self) -> str | None:
        """``None`` when the "create volume" shortcut can create, else one sentence."""
        return volume_problem(self._offer, self.region.value, self._volume_offers,
                              self.volume_name.value, self.volume_size.value)

    def _update_volume_create(self) -> None:
        self.volume_info.value = volume_info_html(self._offer, self.region.value,
                                                  self._volume_offer(), self.volume_size.value)
        problem = self.volume_problem
        self.volume_create_button.disabled = problem is not None
        self.volume_reason.value = "" if problem is None else \
            hint(escape(problem), WARNING)

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
