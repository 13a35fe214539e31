"""``DeployForm``: deploy a catalogue model as an inference instance (an endpoint), from a form.

    >>> form = DeployForm(cloud)  # doctest: +SKIP
    >>> form  # model, hardware, region (with capacity), min/max, cooldown, price per hour  # doctest: +SKIP
    >>> form.deploy()  # the Deploy button; then it waits, showing containers ready/total  # doctest: +SKIP

Choices, written down once:

- The hardware list shows each one's price per container-hour; choosing a model picks its
  default hardware. The region list shows each region's capacity for the chosen hardware and
  is read afresh when the hardware changes; the first with capacity is chosen.
- The price line reads "$0.75/h per container: $0.00/h at min 0, up to $1.50/h at max 2",
  before anything is deployed. Without a catalogue price it says so.
- Every refusal (an empty name, min over max, a region without capacity, the cost cap, the
  cloud's own) is one sentence in the status line; nothing is sent until the client's checks
  pass. After a deploy, the form waits in a thread until the instance is active, showing
  ``ready/total`` containers, and ends with its address.
"""

from __future__ import annotations

import math
import threading
from typing import Any

import ipywidgets as widgets

from gpucloud_nb.client.management import GPUCloud
from gpucloud_nb.errors import GPUCloudError
from gpucloud_nb.models import (
    InferenceHardware,
    InferenceInstance,
    InferenceInstanceDetails,
    InferenceModel,
    InferenceRegion,
)
from gpucloud_nb.widgets._dropdowns import set_options
from gpucloud_nb.widgets._format import money
from gpucloud_nb.widgets._layout import css
from gpucloud_nb.widgets._status import StatusLine, describe_error

__all__ = ["CSS_CLASSES", "DeployForm"]

CSS_CLASSES = {name: f"gpucloud-deploy-{name}" for name in (
    "form", "name", "model", "hardware", "region", "min", "max", "cooldown", "price", "deploy",
    "status")}


def _per_hour(value: float) -> str:
    return f"{money(value)}/h"


class DeployForm(widgets.VBox):
    """A form that deploys a model as an inference instance (see the module docs).

        >>> DeployForm(cloud, model="sandbox-vision-1")  # doctest: +SKIP
    """

    def __init__(self, cloud: GPUCloud, *, model: str | None = None, name: str = "",
                 **kwargs: Any) -> None:
        self._cloud = cloud
        self._models: list[InferenceModel] = []
        self._hardwares: list[InferenceHardware] = []
        self._regions: list[InferenceRegion] = []
        self._thread: threading.Thread | None = None
        self.instance: InferenceInstance | None = None
        self.details: InferenceInstanceDetails | None = None
        style = {"description_width": "8em"}
        self._name = css(widgets.Text(value=name, description="Name", style=style,
                                      placeholder="my-endpoint"), CSS_CLASSES["name"])
        self._model = css(widgets.Dropdown(description="Model", style=style), CSS_CLASSES["model"])
        self._hardware = css(widgets.Dropdown(description="Hardware", style=style),
                             CSS_CLASSES["hardware"])
        self._region = css(widgets.Dropdown(description="Region", style=style),
                           CSS_CLASSES["region"])
        self._min = css(widgets.BoundedIntText(value=0, min=0, max=64, description="Min",
                                               style=style), CSS_CLASSES["min"])
        self._max = css(widgets.BoundedIntText(value=1, min=1, max=64, description="Max",
                                               style=style), CSS_CLASSES["max"])
        self._cooldown = css(widgets.BoundedFloatText(value=300, min=0, max=86_400,
                                                      description="Cooldown (s)", style=style),
                             CSS_CLASSES["cooldown"])
        self._price = css(widgets.HTML(), CSS_CLASSES["price"])
        self._deploy = css(widgets.Button(description="Deploy", button_style="primary",
                                          icon="rocket"), CSS_CLASSES["deploy"])
        self.status = StatusLine(CSS_CLASSES["status"])
        super().__init__([self._name, self._model, self._hardware, self._region, self._min,
                          self._max, self._cooldown, self._price, self._deploy, self.status],
                         **kwargs)
        self.add_class(CSS_CLASSES["form"])
        self._observing = False  # while loading, _on_model reads the regions itself
        self._load(model)
        self._observing = True
        self._model.observe(lambda _: self._on_model(), names="value")
        self._hardware.observe(lambda _: self._on_hardware(), names="value")
        for field in (self._min, self._max, self._region):
            field.observe(lambda _: self._show_price(), names="value")
        self._deploy.on_click(lambda _: self.deploy())

    # ------------------------------------------------------------------ public API

    @property
    def price_text(self) -> str:
        """What the price line says, as text."""
        return self._price_sentence()

    def choose(self, *, model: str | None = None, hardware: str | None = None,
               region: str | None = None, name: str | None = None, min: int | None = None,
               max: int | None = None, cooldown: float | None = None) -> None:
        """Set fields as a person would (ids for model, hardware and region)."""
        if model is not None:
            self._model.value = model
        if hardware is not None:
            self._hardware.value = hardware
        if region is not None:
            self._region.value = region
        if name is not None:
            self._name.value = name
        if max is not None:
            self._max.value = max
        if min is not None:
            self._min.value = min
        if cooldown is not None:
            self._cooldown.value = cooldown

    def deploy(self, *, wait: bool = True) -> InferenceInstance | None:
        """Deploy what the form shows; refusals go to the status line as one sentence. With
        ``wait``, a thread then waits until it is active (:meth:`join` waits for that)."""
        name = self._name.value.strip()
        if not name:
            self.status.error("Give the endpoint a name.")
            return None
        if self._min.value > self._max.value:
            self.status.error(f"Min ({self._min.value}) is more than max ({self._max.value}).")
            return None
        try:
            instance = self._cloud.inference_instances.create(
                name=name, model=self._model.value, hardware=self._hardware.value,
                region=self._region.value, min=int(self._min.value), max=int(self._max.value),
                cooldown=float(self._cooldown.value))
        except Exception as error:  # never a traceback in the notebook
            self.status.error(describe_error(error, mask=self._cloud.scrub))
            return None
        self.instance = instance
        self.status.info(f"Deploying {instance.name}…")
        if wait:
            self._thread = threading.Thread(target=self._wait, args=(instance.id,), daemon=True,
                                            name="gpucloud-deploy-wait")
            self._thread.start()
        return instance

    def join(self, timeout: float | None = None) -> None:
        """Wait for the thread that waits for the deploy, if any."""
        if self._thread is not None:
            self._thread.join(timeout)

    def close(self) -> None:
        """Close the form (a wait under way ends by itself)."""
        super().close()

    # ------------------------------------------------------------------ internals

    def _load(self, model: str | None) -> None:
        try:
            endpoints = self._cloud.inference_instances
            self._models = endpoints.models()
            self._hardwares = endpoints.hardwares()
        except GPUCloudError as error:
            self.status.error(describe_error(error, mask=self._cloud.scrub))
            return
        set_options(self._model, [(f"{m.name or m.id} ({', '.join(m.feature_names)})", m.id)
                                  for m in self._models],
                    model if any(m.id == model for m in self._models) else None)
        set_options(self._hardware, [(self._hardware_label(h), h.id) for h in self._hardwares])
        self._on_model()

    @staticmethod
    def _hardware_label(hardware: InferenceHardware) -> str:
        price = hardware.price
        shown = _per_hour(price) if math.isfinite(price) else "price not shown"
        return f"{hardware.name} · {shown}"

    def _on_model(self) -> None:
        chosen = next((m for m in self._models if m.id == self._model.value), None)
        if chosen is not None and any(h.id == chosen.default_hardware_id for h in self._hardwares):
            if self._hardware.value != chosen.default_hardware_id and self._observing:
                self._hardware.value = chosen.default_hardware_id  # observed: _on_hardware runs
                return
            self._hardware.value = chosen.default_hardware_id
        self._on_hardware()

    def _on_hardware(self) -> None:
        try:
            self._regions = self._cloud.inference_instances.regions()
        except GPUCloudError as error:
            self.status.error(describe_error(error, mask=self._cloud.scrub))
            return
        hardware = self._hardware.value or ""
        options = []
        for region in self._regions:
            capacity = region.capacity_for(hardware)
            room = f"capacity {capacity}" if capacity else "no capacity"
            options.append((f"{region.name or region.id} ({region.country_code}) · {room}",
                            region.id))
        able = next((r.id for r in self._regions if r.capacity_for(hardware) > 0), None)
        kept = next((r for r in self._regions if r.id == self._region.value), None)
        set_options(self._region, options, able,  # the region chosen, while it has room
                    keep=kept is not None and kept.capacity_for(hardware) > 0)
        self._show_price()

    def _price_sentence(self) -> str:
        hardware = next((h for h in self._hardwares if h.id == self._hardware.value), None)
        if hardware is None:
            return ""
        price = hardware.price
        if not math.isfinite(price):
            return (f"The catalogue shows no price for {hardware.name}; the instance's "
                    "hourlyPrice shows once it is deployed.")
        low, high = int(self._min.value), int(self._max.value)
        return (f"{_per_hour(price)} per container: {_per_hour(price * low)} at min {low}, "
                f"up to {_per_hour(price * high)} at max {high}.")

    def _show_price(self) -> None:
        self._price.value = f"<span>{self._price_sentence()}</span>"

    def _wait(self, id: str) -> None:
        def progress(details: InferenceInstanceDetails, elapsed: float) -> None:
            self.status.info(f"Deploying {details.name}: {details.status}, {details.ready}/"
                             f"{details.total} containers ready ({elapsed:.0f} s)…")

        try:
            self.details = self._cloud.inference_instances.wait_until_active(
                id, on_progress=progress)
        except Exception as error:  # shown, never raised in a thread
            self.status.error(describe_error(error, mask=self._cloud.scrub))
            return
        self.status.success(f"{self.details.name} is active at {self.details.address}")
