"""The inference catalogue as DataFrames: prices per hour where the catalogue gives them."""

from __future__ import annotations

import math

from gpucloud_nb.inference_frames import hardwares_frame, models_frame
from gpucloud_nb.models import InferenceHardware, InferenceModel, InferenceRegion

HARDWARES = [InferenceHardware.from_json(item) for item in (
    {"id": "h2", "name": "H100", "gpu": {"model": "H100", "count": 1, "memory": 80},
     "hourlyPrice": 3.0},
    {"id": "h0", "name": "Mystery"},
    {"id": "h1", "name": "A100", "gpu": {"model": "A100", "count": 2, "memory": 40},
     "hourlyPrice": 1.5},
)]


def test_hardwares_are_cheapest_first_with_capacity_summed_over_regions() -> None:
    regions = [InferenceRegion.from_json({"id": r, "capacities": [
        {"hardwareId": "h1", "capacity": n}]}) for r, n in (("eu", 2), ("us", 3))]
    frame = hardwares_frame(HARDWARES, regions)
    assert list(frame.name) == ["A100", "H100", "Mystery"]
    assert list(frame.capacity) == [5, 0, 0] and frame.gpuCount[0] == 2
    assert frame.hourlyPrice[1] == 3.0 and math.isnan(frame.hourlyPrice[2])


def test_models_show_their_default_hardware_and_its_price() -> None:
    models = [InferenceModel.from_json({"id": "m", "name": "Chat", "port": 8000,
                                        "defaultHardwareId": "h1", "features": ["chat", "image"]}),
              InferenceModel.from_json({"id": "x", "defaultHardwareId": "gone"})]
    frame = models_frame(models, HARDWARES)
    assert list(frame.columns) == ["id", "name", "features", "port", "defaultHardwareId",
                                   "defaultHardware", "hourlyPrice"]
    assert frame.features[0] == "chat, image" and frame.defaultHardware[0] == "A100"
    assert frame.hourlyPrice[0] == 1.5 and math.isnan(frame.hourlyPrice[1])
