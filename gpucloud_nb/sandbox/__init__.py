"""The sandbox: a faithful local implementation of the GPU cloud, served over real HTTP.

    >>> from gpucloud_nb.sandbox import Sandbox
    >>> with Sandbox() as sandbox:  # doctest: +SKIP
    ...     cloud = GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url)
    ...     cloud.instances.offers(gpu_type="h100", sort="price")[0].hourly_price
    2.19

``DEFAULT_API_KEY`` and ``DEFAULT_INFERENCE_SECRET`` are public, documented values that let the
sandbox run without any key; they grant nothing anywhere else. Importing this package is cheap:
the web stack loads when a sandbox starts.
"""

from gpucloud_nb.sandbox.config import DEFAULT_API_KEY, DEFAULT_INFERENCE_SECRET, SandboxConfig
from gpucloud_nb.sandbox.server import Sandbox

__all__ = ["DEFAULT_API_KEY", "DEFAULT_INFERENCE_SECRET", "Sandbox", "SandboxConfig"]
