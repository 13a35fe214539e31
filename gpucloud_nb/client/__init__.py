"""HTTP clients for the GPU cloud: management (offers, instances, volumes) and inference.

This package imports neither ipywidgets nor IPython, and pandas only inside the ``*_frame``
conveniences.

    >>> from gpucloud_nb.client import GPUCloud
    >>> GPUCloud(api_key="...", base_url="https://...").volumes.list()  # doctest: +SKIP
"""

from gpucloud_nb.client.inference import AsyncInferenceClient, InferenceClient
from gpucloud_nb.client.management import AsyncGPUCloud, GPUCloud

__all__ = ["AsyncGPUCloud", "AsyncInferenceClient", "GPUCloud", "InferenceClient"]
