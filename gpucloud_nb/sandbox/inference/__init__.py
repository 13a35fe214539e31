"""The sandbox's inference endpoint, mounted at ``/inference`` (see :mod:`.app` for its choices).

    >>> from gpucloud_nb.sandbox.inference import create_inference_app
    >>> app = create_inference_app(SandboxConfig(inference_rate_limit=5.0))  # doctest: +SKIP

``app`` serves ``/v1/models``, ``/v1/chat/completions`` and ``/v1/audio/transcriptions`` with
deterministic local models, or forwards them to ``config.upstream`` (:mod:`.upstream`);
:mod:`.ratelimit` holds the per-secret token bucket.
"""

from gpucloud_nb.sandbox.inference.app import create_inference_app

__all__ = ["create_inference_app"]
