"""The inference catalogue as pandas DataFrames: models and hardwares, with prices per hour.

Columns keep the appendix's field names (``defaultHardwareId``, ``hourlyPrice``...), as
:mod:`gpucloud_nb.frames` does for offers. Nothing here does I/O.

    >>> hardwares_frame(cloud.inference_instances.hardwares(),  # doctest: +SKIP
    ...                 cloud.inference_instances.regions()).sort_values("hourlyPrice")

Choices: ``hourlyPrice`` is per container-hour and NaN where the catalogue gives no price (see
:mod:`gpucloud_nb.inference_records`); ``features`` is a comma-joined string (``"chat, image"``);
``capacity`` is the containers of that hardware the regions can take now, summed.
"""

from __future__ import annotations

from collections.abc import Iterable

import pandas as pd

from gpucloud_nb.frame_columns import float_column, int_column, text_column
from gpucloud_nb.inference_records import (
    InferenceHardware,
    InferenceInstanceDetails,
    InferenceModel,
    InferenceRegion,
)

__all__ = ["endpoints_frame", "hardwares_frame", "models_frame"]


def models_frame(models: Iterable[InferenceModel],
                 hardwares: Iterable[InferenceHardware] = ()) -> pd.DataFrame:
    """One row per catalogue model, with its default hardware's name and price per hour.

        >>> models_frame([InferenceModel(id="m", default_hardware_id="h")],
        ...              [InferenceHardware(id="h", name="A100", hourly_price=1.5)]).hourlyPrice[0].item()
        1.5
    """
    models = list(models)
    by_id = {h.id: h for h in hardwares}
    defaults = [by_id.get(m.default_hardware_id) for m in models]
    frame: pd.DataFrame = pd.DataFrame({
        "id": text_column([m.id for m in models]),
        "name": text_column([m.name for m in models]),
        "features": text_column([", ".join(m.feature_names) for m in models]),
        "port": int_column([m.port for m in models]),
        "defaultHardwareId": text_column([m.default_hardware_id for m in models]),
        "defaultHardware": text_column([h.name if h else None for h in defaults]),
        "hourlyPrice": float_column([h.price if h else float("nan") for h in defaults]),
    })
    return frame


def hardwares_frame(hardwares: Iterable[InferenceHardware],
                    regions: Iterable[InferenceRegion] = ()) -> pd.DataFrame:
    """One row per catalogue hardware: CPU, RAM, GPUs, price per hour and capacity, cheapest
    first (hardware without a price last).

        >>> hardwares_frame([InferenceHardware(id="h", name="A100", hourly_price=1.5)]).name[0]
        'A100'
    """
    hardwares = list(hardwares)
    regions = list(regions)
    frame: pd.DataFrame = pd.DataFrame({
        "id": text_column([h.id for h in hardwares]),
        "name": text_column([h.name for h in hardwares]),
        "gpuModel": text_column([h.gpu.model for h in hardwares]),
        "gpuCount": int_column([h.gpu.count for h in hardwares]),
        "gpuMemory": float_column([h.gpu.memory for h in hardwares]),
        "cpu": float_column([h.cpu for h in hardwares]),
        "ram": float_column([h.ram for h in hardwares]),
        "hourlyPrice": float_column([h.price for h in hardwares]),
        "capacity": int_column([sum(r.capacity_for(h.id) for r in regions) for h in hardwares]),
    })
    ordered: pd.DataFrame = frame.sort_values("hourlyPrice", kind="stable", na_position="last")
    result: pd.DataFrame = ordered.reset_index(drop=True)
    return result


def endpoints_frame(endpoints: Iterable[InferenceInstanceDetails]) -> pd.DataFrame:
    """One row per inference instance: status, containers ready and wanted, the price per
    container-hour and at the most containers, its address.

        >>> endpoints_frame([InferenceInstanceDetails(name="chat", status="ACTIVE")]).status[0]
        'ACTIVE'
    """
    endpoints = list(endpoints)
    frame: pd.DataFrame = pd.DataFrame({
        "name": text_column([e.name for e in endpoints]),
        "status": text_column([e.status for e in endpoints]),
        "ready": int_column([e.ready for e in endpoints]),
        "total": int_column([e.total for e in endpoints]),
        "maxContainers": int_column([e.max_containers for e in endpoints]),
        "hourlyPrice": float_column([e.hourly_price for e in endpoints]),
        "maxHourly": float_column([e.hourly_price * e.max_containers for e in endpoints]),
        "hardwareName": text_column([e.hardware_name for e in endpoints]),
        "address": text_column([e.address for e in endpoints]),
        "_id": text_column([e.id for e in endpoints]),
    })
    return frame
