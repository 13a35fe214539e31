"""Benchmark: an inference instance of the sandbox, cold and warm (#38).

- cold start: seconds from sending a streamed chat to an endpoint that scaled to zero until its
  first chunk arrives, against the sandbox's configured start time (``cold_start_seconds``).
  Target: ours minus that ≤ +500 ms.
- warm round trip: the median of ``chats`` short non-streamed chats through
  ``cloud.inference_instances.chat_client(name)`` against the same chats through the OpenAI SDK
  (``openai.OpenAI``, the ``x-api-key`` header as a default header) at the same address, taken in
  alternation so load drifts hit both alike. Target: ratio ≤ 1.10×.

The sandbox runs in this process's threads (as the tests' sandboxes do), on loopback.
Run standalone with ``python -m benchmarks.bench_endpoints``.
"""

from __future__ import annotations

import statistics
import time

from gpucloud_nb import GPUCloud
from gpucloud_nb.sandbox import Sandbox

__all__ = ["QUICK", "UNIT", "run"]

Row = tuple[str, float, float, float, str]
UNIT = "s"
QUICK = {"chats": 20, "colds": 1}
MODEL = "sandbox-vision-1"
PROMPT = "What is 2+2?"


def _scaled_to_zero(cloud: GPUCloud, name: str) -> None:
    deadline = time.monotonic() + 120
    while not cloud.inference_instances.get(name).scaled_to_zero:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{name} did not scale to zero in 120 s")
        time.sleep(0.05)


def run(chats: int = 200, colds: int = 3, cold_start: float = 1.0) -> list[Row]:
    """Rows (name, ours, baseline, ratio, target); times in seconds."""
    import openai

    with Sandbox(launch_seconds=0.3, cold_start_seconds=cold_start) as box, \
            GPUCloud(api_key=box.api_key, base_url=box.management_url) as cloud:
        cloud.inference_instances.create(name="cold", model=MODEL, min=0, max=1, cooldown=0.3)
        cloud.inference_instances.create(name="warm", model=MODEL, min=1, max=1, cooldown=3600)
        cloud.inference_instances.wait_until_active("cold", poll_interval=0.05)
        cloud.inference_instances.wait_until_active("warm", poll_interval=0.05)
        firsts = []
        with cloud.inference_instances.chat_client("cold") as chat:
            chat.models()  # the model list is cached: only the chat waits
            for _ in range(colds):
                _scaled_to_zero(cloud, "cold")
                began = time.perf_counter()
                with chat.chat(PROMPT, stream=True) as stream:
                    next(iter(stream))
                    firsts.append(time.perf_counter() - began)
        address = cloud.inference_instances.get("warm").address
        ours_times, sdk_times = [], []
        sdk = openai.OpenAI(base_url=address.rstrip("/") + "/v1", api_key="unused",
                            default_headers={"x-api-key": box.api_key}, max_retries=0)
        with cloud.inference_instances.chat_client("warm") as chat:
            messages = [{"role": "user", "content": PROMPT}]
            chat.chat(PROMPT)
            sdk.chat.completions.create(model=MODEL, messages=messages)  # type: ignore[arg-type]
            for _ in range(chats):
                began = time.perf_counter()
                chat.chat(PROMPT, model=MODEL)
                ours_times.append(time.perf_counter() - began)
                began = time.perf_counter()
                sdk.chat.completions.create(model=MODEL, messages=messages)  # type: ignore[arg-type]
                sdk_times.append(time.perf_counter() - began)
        sdk.close()
    cold = statistics.median(firsts)
    ours, theirs = statistics.median(ours_times), statistics.median(sdk_times)
    return [
        (f"cold start: first streamed chunk vs the configured start ({colds} starts, median)",
         cold, cold_start, cold / cold_start, "<= +500 ms"),
        (f"warm chat round trip: chat_client vs the OpenAI SDK, same address ({chats} each, "
         "median)", ours, theirs, ours / theirs, "<= 1.10x"),
    ]


def main() -> None:
    import os

    for name, ours, baseline, ratio, target in run():
        print(f"{name}: ours {ours * 1e3:.1f} ms, baseline {baseline * 1e3:.1f} ms, "
              f"ratio {ratio:.3f}x, target {target}, load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
