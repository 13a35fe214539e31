"""``OffersBrowser``: filter the GPU offers catalogue, see it as a table, open a launch form.

    >>> browser = OffersBrowser(cloud)  # doctest: +SKIP
    >>> browser.set_filters(gpu="H100", min_gpus=2, region="us-east-1", max_price=20)  # doctest: +SKIP
    >>> browser.frame.head()                     # the rows the table shows, as a DataFrame  # doctest: +SKIP
    >>> form = browser.select("nimbus-h100-sxm5-2x-vm", region="us-east-1")  # doctest: +SKIP

Choices, written down once:

- The catalogue is fetched once (``cloud.instances.offers()``, no server-side filters) and every
  filter is applied locally to :func:`gpucloud_nb.frames.offers_frame` of it: changing a filter
  never calls the cloud; the Refresh button does (``fetch_count`` counts the calls).
- Filter changes from the widgets are debounced (``debounce`` seconds, 0.3 by default; 0 applies
  at once). ``set_filters()`` and ``apply_filters()`` apply at once.
- The GPU filter matches ``gpuName`` exactly when given a listed name, otherwise as a
  case-insensitive substring: the dropdown also offers each GPU family ("H100 (all models)"),
  and ``set_filters(gpu="h100")`` works from code.
- Minimum VRAM compares ``vRamGB`` (memory per GPU) or ``totalVRamGB`` (all GPUs), as chosen.
- A maximum price of 0 means no limit. The table shows at most ``max_rows`` rows (the count
  says so); ``browser.frame`` holds every matching row.
- The table is the pandas Styler of :func:`gpucloud_nb.frames.style_prices` (prices as
  dollars), every other cell HTML-escaped: offer text comes from a server.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

import ipywidgets as widgets
import pandas as pd

from gpucloud_nb.client.management import GPUCloud
from gpucloud_nb.errors import InvalidInputError
from gpucloud_nb.frames import OFFER_COLUMNS, offers_frame
from gpucloud_nb.models import InstanceOffer
from gpucloud_nb.rules import find_offer
from gpucloud_nb.widgets._background import Debouncer
from gpucloud_nb.widgets._dropdowns import choose, set_options
from gpucloud_nb.widgets._format import escape, frame_html, per_hour
from gpucloud_nb.widgets._layout import STYLE
from gpucloud_nb.widgets._status import StatusLine, guarded, log
from gpucloud_nb.widgets.launch_form import LaunchForm

__all__ = ["DEFAULT_COLUMNS", "FILTER_NAMES", "OffersBrowser"]

DEPLOYMENT_TYPES = ("vm", "container", "baremetal")

#: Columns the table shows by default (``browser.frame`` keeps all of :data:`OFFER_COLUMNS`):
#: what a person chooses by first (GPU, price, where, whether it is there), so that a narrow
#: notebook still shows them; the id, needed only to launch from code, last.
DEFAULT_COLUMNS: tuple[str, ...] = (
    "gpuName", "gpuCount", "vRamGB", "hourlyPrice", "region", "available", "deploymentType",
    "providerName", "totalVRamGB", "pricePerGpuHour", "instanceId",
)
_PRICE_COLUMNS = ("hourlyPrice", "pricePerGpuHour")

#: The names :meth:`OffersBrowser.set_filters` accepts, with their "no filter" values.
FILTER_NAMES: dict[str, Any] = {
    "gpu": None,              # gpuName, exact or substring (case-insensitive); None: any
    "min_gpus": 1,            # gpuCount at least
    "min_vram": 0.0,          # GB; 0: any
    "vram": "per_gpu",        # what min_vram compares: "per_gpu" (vRamGB) or "total" (totalVRamGB)
    "region": None,           # region id; None: any
    "deployment_type": None,  # vm, container or baremetal; None: any
    "available_only": True,   # only rows whose region has the offer available
    "max_price": None,        # hourlyPrice at most, in $/h; None (or 0): any
}
_SELECT_PROMPT = "— choose an offer to launch —"


class OffersBrowser(widgets.VBox):
    """The offers catalogue as a filtered table, with a launch form for the offer you pick.

    ``OffersBrowser(cloud, *, debounce=0.3, max_rows=100, columns=DEFAULT_COLUMNS)``.

    From code: :attr:`filters`, :meth:`set_filters`, :meth:`apply_filters`, :attr:`frame` (the
    matching rows), :attr:`all_frame`, :attr:`offers`, :meth:`refresh`, :attr:`fetch_count`,
    :meth:`select` (→ the :class:`LaunchForm`, also in :attr:`form`).

    CSS classes: ``gpucloud-offers-browser`` (the browser), ``gpucloud-offers-filters``,
    ``gpucloud-filter-gpu``, ``gpucloud-filter-min-gpus``, ``gpucloud-filter-min-vram``,
    ``gpucloud-filter-vram-basis``, ``gpucloud-filter-region``, ``gpucloud-filter-deployment``,
    ``gpucloud-filter-available``, ``gpucloud-filter-max-price``, ``gpucloud-offers-refresh``,
    ``gpucloud-offers-count``, ``gpucloud-offers-table`` (the HTML widget; the ``<table>`` inside
    has ``gpucloud-table``), ``gpucloud-offers-select``, ``gpucloud-offers-status`` (with
    ``gpucloud-status``, and ``gpucloud-error`` while it shows an error),
    ``gpucloud-offers-form`` (the box holding the launch form, ``gpucloud-launch-form``).
    """

    def __init__(self, cloud: GPUCloud, *, debounce: float = 0.3, max_rows: int = 100,
                 columns: tuple[str, ...] = DEFAULT_COLUMNS, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.add_class("gpucloud-offers-browser")
        self._cloud = cloud
        self.max_rows = max_rows
        self.columns = tuple(c for c in columns if c in OFFER_COLUMNS)
        self.fetch_count = 0
        self.offers: list[InstanceOffer] = []
        self.all_frame: pd.DataFrame = offers_frame([])
        self.frame: pd.DataFrame = self.all_frame
        self.form: LaunchForm | None = None
        self._names: set[str] = set()
        self._lock = threading.RLock()
        self._quiet = 0

        self.status = StatusLine("gpucloud-offers-status")
        self._build_widgets()
        self._debouncer = Debouncer(debounce, guarded(self.status, self.apply_filters))
        self._wire()
        try:
            self.refresh()
        except Exception:
            log.debug("The first refresh failed; the status line says why", exc_info=True)

    # ------------------------------------------------------------------ construction

    def _build_widgets(self) -> None:
        def styled(widget: widgets.Widget, css: str, width: str | None = None) -> Any:
            widget.add_class(css)
            if width:
                widget.layout.width = width
            return widget

        self.gpu = styled(widgets.Dropdown(description="GPU model", options=[("any", None)],
                                           index=0, style=STYLE), "gpucloud-filter-gpu", "22em")
        self.min_gpus = styled(widgets.BoundedIntText(description="Min GPUs", value=1, min=1,
                                                      max=4096, style=STYLE),
                               "gpucloud-filter-min-gpus", "10em")
        self.min_vram = styled(widgets.BoundedFloatText(description="Min VRAM (GB)", value=0.0,
                                                        min=0.0, max=1e6, step=8, style=STYLE),
                               "gpucloud-filter-min-vram", "13em")
        self.vram_basis = styled(widgets.ToggleButtons(
            options=[("per GPU", "per_gpu"), ("total", "total")], value="per_gpu",
            tooltips=["Memory of one GPU (vRamGB)", "Memory of all GPUs (totalVRamGB)"],
            style={"button_width": "6em"}), "gpucloud-filter-vram-basis")
        self.region = styled(widgets.Dropdown(description="Region", options=[("any", None)],
                                              index=0, style=STYLE), "gpucloud-filter-region", "24em")
        self.deployment = styled(widgets.Dropdown(
            description="Deployment", options=[("any", None)] + [(d, d) for d in DEPLOYMENT_TYPES],
            index=0, style=STYLE), "gpucloud-filter-deployment", "14em")
        self.available_only = styled(widgets.Checkbox(description="Available only", value=True,
                                                      indent=False), "gpucloud-filter-available",
                                     "10em")
        self.max_price = styled(widgets.BoundedFloatText(description="Max price ($/h, 0 = any)",
                                                         value=0.0, min=0.0, max=1e6, step=0.5,
                                                         style=STYLE),
                                "gpucloud-filter-max-price", "20em")
        self.refresh_button = styled(widgets.Button(description="Refresh", icon="refresh",
                                                    tooltip="Fetch the offers again"),
                                     "gpucloud-offers-refresh", "8em")
        self.count = styled(widgets.HTML(), "gpucloud-offers-count")
        self.table = styled(widgets.HTML(), "gpucloud-offers-table")
        self.table.layout.max_height = "26em"
        self.table.layout.overflow = "auto"
        self.offer_select = styled(widgets.Dropdown(description="Launch", style=STYLE,
                                                    options=[(_SELECT_PROMPT, None)], index=0),
                                   "gpucloud-offers-select", "52em")
        self.form_box = styled(widgets.VBox(), "gpucloud-offers-form")

        filters = widgets.HBox(
            [self.gpu, self.min_gpus, widgets.HBox([self.min_vram, self.vram_basis]), self.region,
             self.deployment, self.max_price, self.available_only, self.refresh_button],
            layout=widgets.Layout(flex_flow="row wrap", grid_gap="4px 12px"))
        filters.add_class("gpucloud-offers-filters")
        self.children = (filters, self.count, self.table, self.offer_select, self.status,
                         self.form_box)

    def _wire(self) -> None:
        for widget in (self.gpu, self.min_gpus, self.min_vram, self.vram_basis, self.region,
                       self.deployment, self.available_only, self.max_price):
            widget.observe(guarded(self.status, self._filter_changed), names="value")
        self.refresh_button.on_click(guarded(self.status, lambda _: self.refresh()))
        self.offer_select.observe(guarded(self.status, self._offer_picked), names="value")

    # ------------------------------------------------------------------ data

    def refresh(self) -> pd.DataFrame:
        """Fetch the offers again, keep the filters, and redraw; returns :attr:`frame`."""
        try:
            offers = self._cloud.instances.offers()
            with self._lock:
                self.fetch_count += 1
                self.offers = list(offers)
                self.all_frame = offers_frame(self.offers)
                self._names = {str(n) for n in self.all_frame["gpuName"].dropna().unique()}
                self._quiet += 1
                try:
                    self._rebuild_filter_options()
                finally:
                    self._quiet -= 1
                self.status.clear()
                return self.apply_filters()
        except Exception as error:  # whatever failed, the status line says so
            self.status.error(error)
            raise

    def _rebuild_filter_options(self) -> None:
        names = sorted(self._names)
        families: dict[str, int] = {}
        for name in names:
            family = name.split()[0] if name.split() else name
            families[family] = families.get(family, 0) + 1
        options: list[tuple[str, Any]] = [("any", None)]
        for family in sorted(families):
            if families[family] > 1:
                options.append((f"{family} (all models)", family))
            options.extend((n, n) for n in names if (n.split() or [n])[0] == family)
        current = self.gpu.value
        if current is not None and current not in [v for _, v in options]:
            options.append((f'"{current}" (name contains)', current))
        set_options(self.gpu, options)

        frame = self.all_frame
        pairs = frame[["region", "regionName"]].dropna().drop_duplicates()
        regions = sorted({(str(r), str(n)) for r, n in pairs.itertuples(index=False)})
        region_options: list[tuple[str, Any]] = [("any", None)]
        region_options += [(f"{r} — {n}", r) for r, n in regions]
        current = self.region.value
        if current is not None and current not in [v for _, v in region_options]:
            region_options.append((f"{current} (no offers)", current))
        set_options(self.region, region_options)

    # ------------------------------------------------------------------ filters

    @property
    def filters(self) -> dict[str, Any]:
        """The current filters, as :meth:`set_filters` takes them."""
        return {
            "gpu": self.gpu.value,
            "min_gpus": self.min_gpus.value,
            "min_vram": self.min_vram.value,
            "vram": self.vram_basis.value,
            "region": self.region.value,
            "deployment_type": self.deployment.value,
            "available_only": self.available_only.value,
            "max_price": self.max_price.value or None,
        }

    def set_filters(self, **filters: Any) -> pd.DataFrame:
        """Change filters by name (see :data:`FILTER_NAMES`) and apply them at once.

            >>> browser.set_filters(gpu="H100", min_gpus=2, min_vram=80, vram="per_gpu",  # doctest: +SKIP
            ...                     region="us-east-1", deployment_type="vm",
            ...                     available_only=True, max_price=20)

        ``None`` resets a filter. Returns :attr:`frame`.
        """
        unknown = sorted(set(filters) - set(FILTER_NAMES))
        if unknown:
            raise TypeError(f"set_filters() got unknown filter(s) {', '.join(unknown)}; "
                            f"use: {', '.join(FILTER_NAMES)}.")
        values = {k: (FILTER_NAMES[k] if v is None else v) for k, v in filters.items()}
        if values.get("deployment_type") not in (None, *DEPLOYMENT_TYPES):
            raise InvalidInputError(f"deployment_type must be one of vm, container, baremetal, "
                                    f"not {values['deployment_type']!r}.")
        if values.get("vram", "per_gpu") not in ("per_gpu", "total"):
            raise InvalidInputError(f"vram must be 'per_gpu' or 'total', not {values['vram']!r}.")
        with self._lock:
            self._quiet += 1
            try:
                if "gpu" in values:
                    self._set_gpu(values["gpu"])
                if "min_gpus" in values:
                    self.min_gpus.value = max(1, int(values["min_gpus"]))
                if "min_vram" in values:
                    self.min_vram.value = max(0.0, float(values["min_vram"]))
                if "vram" in values:
                    self.vram_basis.value = values["vram"]
                if "region" in values:
                    choose(self.region, values["region"], "{} (no offers)")
                if "deployment_type" in values:
                    choose(self.deployment, values["deployment_type"])
                if "available_only" in values:
                    self.available_only.value = bool(values["available_only"])
                if "max_price" in values:
                    self.max_price.value = max(0.0, float(values["max_price"] or 0.0))
            finally:
                self._quiet -= 1
            return self.apply_filters()

    def _set_gpu(self, gpu: str | None) -> None:
        if gpu is None:
            choose(self.gpu, None)
            return
        gpu = str(gpu)
        for _, value in self.gpu.options:  # a listed name or family, in any case
            if value is not None and value.casefold() == gpu.casefold():
                choose(self.gpu, value)
                return
        choose(self.gpu, gpu, '"{}" (name contains)')

    def _filter_changed(self, change: Mapping[str, Any]) -> None:
        if not self._quiet:
            self._debouncer()

    def _mask(self, frame: pd.DataFrame) -> pd.Series:
        mask = pd.Series(True, index=frame.index)
        gpu = self.gpu.value
        if gpu:
            names = frame["gpuName"].astype(object)
            if gpu in self._names:
                mask &= names == gpu
            else:
                mask &= names.map(lambda n: isinstance(n, str) and gpu.casefold() in n.casefold())
        mask &= frame["gpuCount"] >= self.min_gpus.value
        if self.min_vram.value > 0:
            column = "totalVRamGB" if self.vram_basis.value == "total" else "vRamGB"
            mask &= frame[column] >= self.min_vram.value
        if self.region.value is not None:
            mask &= frame["region"].astype(object) == self.region.value
        if self.deployment.value is not None:
            mask &= frame["deploymentType"].astype(object) == self.deployment.value
        if self.available_only.value:
            mask &= frame["available"]
        if self.max_price.value > 0:
            mask &= frame["hourlyPrice"] <= self.max_price.value + 1e-9
        return mask.fillna(False).astype(bool)

    def apply_filters(self) -> pd.DataFrame:
        """Apply the filters to the fetched offers now (no request) and redraw; returns the rows."""
        with self._lock:
            self._debouncer.cancel()
            frame = self.all_frame
            self.frame = frame[self._mask(frame)].reset_index(drop=True)
            self._render()
            return self.frame

    # ------------------------------------------------------------------ drawing

    def _render(self) -> None:
        shown, total = len(self.frame), len(self.all_frame)
        note = f", showing the first {self.max_rows}" if shown > self.max_rows else ""
        self.count.value = f"<b>{shown} of {total} offers</b>{escape(note)}"
        visible = self.frame.head(self.max_rows)
        if visible.empty:
            self.table.value = ("<i>No offer matches these filters.</i>" if total else
                                "<i>No offers.</i>")
        else:
            self.table.value = frame_html(visible[list(self.columns)], price_columns=_PRICE_COLUMNS)
        options: list[tuple[str, Any]] = [(_SELECT_PROMPT, None)]
        for row in visible.itertuples(index=False):
            sold_out = "" if row.available else " (sold out here)"
            label = (f"{row.gpuName} ×{row.gpuCount} · {row.deploymentType} · {row.providerName} · "
                     f"{row.region} · {per_hour(row.hourlyPrice)}{sold_out} ({row.instanceId})")
            # Keyed by provider too: two providers may sell the same instanceId.
            options.append((label, (str(row.instanceId), str(row.region), str(row.providerId))))
        self._quiet += 1
        try:
            set_options(self.offer_select, options, None)
        finally:
            self._quiet -= 1

    # ------------------------------------------------------------------ launching

    def _offer_picked(self, change: Mapping[str, Any]) -> None:
        if self._quiet or change.get("new") is None:
            return
        instance_id, region, provider = change["new"]
        self.select(instance_id, region=region, provider=provider)

    def select(self, instance_id: str, region: str | None = None,
               provider: str | None = None) -> LaunchForm:
        """Open a :class:`LaunchForm` for this offer (in ``region``) below the table; return it.

        ``provider`` (its ``_id`` or name) is needed only when several providers sell offers
        with this ``instanceId``. Without ``region``: the first matching row's region where the
        offer is available.
        """
        try:
            offer = find_offer(self.offers, instance_id, provider)
            if region is None:
                rows = self.frame[(self.frame["instanceId"].astype(object) == instance_id)
                                  & (self.frame["providerId"].astype(object) == offer.cloud.id)
                                  & self.frame["available"]]
                region = str(rows["region"].iloc[0]) if len(rows) else \
                    next(iter(offer.available_regions), None)
            if self.form is not None:
                self.form.close()
            form = LaunchForm(self._cloud, offer, region=region)
            self.form = form
            self.form_box.children = (form,)
            self._quiet += 1
            try:
                key = (instance_id, region, offer.cloud.id)
                self.offer_select.value = key if key in [v for _, v in self.offer_select.options] \
                    else None
            finally:
                self._quiet -= 1
        except Exception as error:
            self.status.error(error)
            raise
        self.status.clear()
        return form

    def close(self) -> None:
        """Close the browser, its launch form, and a pending debounced redraw."""
        self._debouncer.cancel()
        if self.form is not None:
            self.form_box.children = ()  # no open widget may refer to a closed one
            self.form.close()
        super().close()

    def __repr__(self) -> str:
        return f"<OffersBrowser {len(self.frame)} of {len(self.all_frame)} offers>"
