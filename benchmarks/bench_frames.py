"""Benchmark: the offers DataFrame against ``json.loads`` alone and against ``json_normalize``.

A synthetic catalogue of 10,000 offers × 3 regions (deterministic seed, field values shaped like
the spec's InstanceOffer) is serialised to one JSON body of about 6.7 MB. A server process
(:mod:`benchmarks._servers`, kind ``offers``) answers ``GET /gpu-cloud/instances/offers`` with
that body. Each step runs once in each of ``repeat`` rounds, in a shuffled order:

- ``json.loads(body)``: the bare parse, the baseline;
- ``cloud.instances.offers_frame()``: the whole fetch-parse-frame, over loopback HTTP. The client
  hands the body to :func:`~gpucloud_nb.frames.offers_frame`, which decodes it straight into
  typed rows (msgspec) rather than a dict per offer;
- ``offers_frame(parsed)`` on a list just parsed by ``json.loads`` (untimed);
- ``offers_frame(body)`` on the body itself, and the same against a second catalogue of another
  shape (:data:`benchmarks._offers.SECOND`: fewer GPU types and regions, more providers);
- ``pandas.json_normalize(parsed, record_path="availability", meta=[...])`` on the same.

Targets: ``offers_frame`` on the body ≤ 0.8 × the bare parse on both catalogues,
fetch-parse-frame ≤ 1.5 × the bare parse, and ``offers_frame`` on parsed JSON ≥ 1.8× faster
than ``json_normalize``; ``offers_frame`` on parsed JSON against the bare parse is shown without
a target. How the steps are timed (collector off, CPU time): :func:`_rounds`. A ratio is the
median of the ratios of the two steps within each round, not of two bests: under load the best of
a few rounds was mostly the machine (:func:`_ratio`). Run standalone with
``python -m benchmarks.bench_frames``.

Where the time goes (29 Nov 2026, 10,000 offers, 2 cores shared, load 4-9; medians of CPU
times of one process, each piece timed alone; first / second catalogue): ``json.loads``
108-116 ms; ``offers_frame`` on the body 68-75 ms, of which msgspec's decode of the offers with
``configuration`` and ``availability`` kept as text 18-21 ms (freeing included), coding those
texts (a ``bytes`` copy and a dict lookup per offer) and decoding each distinct one once 22-25 ms
(2,572 / 1,665 distinct availability lists, 2,913 / 2,657 configurations), the gathering loop
and the rows built from the distinct lists 5-14 ms, and the numpy and pandas work after it (the
row order, categoricals, the text column) 13-15 ms. Before that change (28 Nov) the decode into
full records was 30-37 ms, the gathering loop 17-24 ms, the numpy and pandas work 17-25 ms and
freeing the records 7 ms: 0.87x / 0.87x and 0.88x / 0.83x ``json.loads`` in two runs. Read round
by round, ``offers_frame`` on the body is now 0.74x / 0.70x (load 4.7) and 0.71x / 0.68x (load
3.7) ``json.loads`` on the two catalogues. Tried and dropped, no gain beyond the noise: one key
per offer's names or per availability entry (a tuple built and hashed costs what the separate
lookups did), msgspec's hashable frozen records as keys (their hash and equality cost more than
the lookups they save), ``operator.attrgetter``/``msgspec.structs.astuple`` columns or one list
comprehension per column (slower than the one loop), one integer sort key for the rows (a full
sort where the two stable sorts see nearly sorted keys), and a decoder call per distinct text
(the calls' overhead ate the gain; they are now joined into one JSON array and decoded at once).
What is left is per value: the offers' own strings and structs, and one ``bytes`` copy per
nested text to find the distinct ones. Records or parsed JSON take the old way, one record per
offer (0.78-0.87x ``json.loads`` in the same runs, 0.72x before: the split loops cost a little).
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

import pandas as pd
from pandas.testing import assert_frame_equal

from benchmarks._offers import SECOND, make_offers
from benchmarks._servers import KEY, ServerProcess
from gpucloud_nb import GPUCloud
from gpucloud_nb.frames import offers_frame

__all__ = ["run"]

Row = tuple[str, float, float, float, str]

#: Smaller sizes for `python -m benchmarks --quick` (a smoke test, not a measurement).
QUICK: dict[str, Any] = {"n": 1_000, "repeat": 2}

_META = [
    "gpuName",
    "gpuCount",
    "nvlink",
    "deploymentType",
    "instanceId",
    "cloudInitAvailable",
    "hourlyPrice",
    ["cloud", "_id"],
    ["cloud", "name"],
    ["configuration", "ramGB"],
    ["configuration", "storageGB"],
    ["configuration", "vCpu"],
    ["configuration", "vRamGB"],
    ["configuration", "os"],
    ["configuration", "interconnect"],
]


Step = tuple[Callable[[], Any], Callable[[Any], Any]]


def _rounds(steps: dict[str, Step], repeat: int) -> dict[str, list[float]]:
    """Each ``(prepare, step)``'s time in every round: ``step(prepare())``, only the step timed.

    Every round runs each step once, in an order shuffled afresh (a fixed seed), so a noisy
    neighbour on the machine slows each step alike over the rounds rather than one of them, and
    no step always runs in the wake of the same other one. A figure is then read round by round
    (:func:`_ratio`): the two steps it compares ran a fraction of a second apart, under the same
    load. Each step is timed with the cyclic garbage collector off (collected just before):
    ``json.loads`` makes some 80,000 containers, which in a small process set off full
    collections that a process holding a large heap (``python -m benchmarks`` after the other
    modules) does not, so with the collector on the baseline, and the ratio, depended on what
    else the process held (0.65-0.69x standalone, 0.93x in the whole run, same code). Each step's
    time includes freeing what it made, its result too (the statement ``step(argument)``): what
    the step costs the process, for ``json.loads`` its dicts as for ``offers_frame`` its records.
    Steps named in ``CPU`` are timed by this thread's CPU time, which a busy machine's waits for
    a core do not inflate; the HTTP pipeline, half of it in the server process, by the clock.
    """
    times: dict[str, list[float]] = {name: [] for name in steps}
    order = list(steps)
    shuffle = random.Random(20261128).shuffle
    for _ in range(repeat):
        shuffle(order)
        for name in order:
            prepare, step = steps[name]
            argument = prepare()
            clock = time.thread_time if name in CPU else time.perf_counter
            gc.collect()
            gc.disable()
            try:
                start = clock()
                step(argument)
                times[name].append(clock() - start)
            finally:
                gc.enable()
            del argument
    return times


def _ratio(ours: list[float], baseline: list[float],
           clock: bool = False) -> tuple[float, float, float]:
    """(ours, baseline, ratio): the median of each and the median of the round-by-round ratios.

    Under load one pass of A then B gives a ratio that is mostly the machine (0.80-1.12x for the
    same code at load 5-15); the ratio of two steps of the same round, a fraction of a second
    apart, cancels the load that both saw, and the median over the rounds drops the rounds that
    a burst hit in the middle of one step. The times shown are the medians of each step alone.
    With ``clock`` (``ours`` timed by the clock, across two processes) the bests and their ratio
    instead: a wait for a core only adds to such a time, and the server's share of it is not
    cancelled by the round's baseline, which ran in this thread alone.
    """
    if clock:
        return min(ours), min(baseline), min(ours) / min(baseline)
    return (statistics.median(ours), statistics.median(baseline),
            statistics.median(a / b for a, b in zip(ours, baseline, strict=True)))


#: Rounds of a full run: enough for the median of the round-by-round ratios to settle at load
#: 10-15 on 2 cores (about 1 s a round).
REPEAT = 21

#: Steps timed by CPU time (no I/O, one thread).
CPU = frozenset({"loads", "frame", "body", "normalize", "loads 2", "body 2"})


def run(n: int = 10_000, regions: int = 3, repeat: int = REPEAT) -> list[Row]:
    """Time the steps; rows are (name, ours, baseline, ratio, target), times in seconds."""
    body = json.dumps(make_offers(n, regions)).encode()
    second = json.dumps(make_offers(n, regions, shape=SECOND)).encode()
    server = ServerProcess("offers", str(n), str(regions))
    try:
        with GPUCloud(api_key=KEY, base_url=server.url) as cloud:
            # Warm-up (imports, caches, the connection), and proof that both paths agree.
            assert_frame_equal(cloud.instances.offers_frame(), offers_frame(json.loads(body)))
            assert_frame_equal(offers_frame(second), offers_frame(json.loads(second)))
            pd.json_normalize(json.loads(body)[:10], record_path="availability", meta=_META)

            def nothing() -> None:
                return None

            def parsed() -> Any:
                return json.loads(body)

            times = _rounds(
                {
                    "loads": (nothing, lambda _: json.loads(body)),
                    "pipeline": (nothing, lambda _: cloud.instances.offers_frame()),
                    "frame": (parsed, offers_frame),
                    "body": (nothing, lambda _: offers_frame(body)),
                    "loads 2": (nothing, lambda _: json.loads(second)),
                    "body 2": (nothing, lambda _: offers_frame(second)),
                    "normalize": (parsed, lambda data: pd.json_normalize(
                        data, record_path="availability", meta=_META)),
                },
                repeat,
            )
    finally:
        server.close()
    gpus, providers, places = SECOND
    figures = [
        ("offers_frame on the body (bytes) vs json.loads, CPU time", "body", "loads", "<= 0.8x"),
        (f"the same, second catalogue ({gpus} GPU types, {providers} providers, {places} regions)",
         "body 2", "loads 2", "<= 0.8x"),
        ("offers fetch-parse-frame (cloud.instances.offers_frame) vs json.loads", "pipeline",
         "loads", "<= 1.5x"),
        ("offers_frame on parsed JSON vs json.loads, CPU time", "frame", "loads", ""),
    ]
    rows: list[Row] = [(name, *_ratio(times[ours], times[baseline], ours not in CPU), target)
                       for name, ours, baseline, target in figures]
    frame, normalize, speedup = _ratio(times["frame"], times["normalize"])
    rows.append(("offers_frame vs json_normalize on parsed JSON (speed-up)", frame, normalize,
                 1 / speedup, ">= 1.8x"))
    return rows


def main(argv: list[str] | None = None) -> None:
    """Print one line per figure: name, ours, baseline, ratio, target."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--offers", type=int, default=10_000, help="offers in the catalogue")
    parser.add_argument("--regions", type=int, default=3, help="availability regions per offer")
    parser.add_argument("--repeat", type=int, default=REPEAT,
                        help="rounds; the median of them counts (raise it on a busy machine)")
    args = parser.parse_args(argv)
    for name, ours, baseline, ratio, target in run(args.offers, args.regions, args.repeat):
        print(f"{name}: ours {ours * 1e3:.1f} ms, baseline {baseline * 1e3:.1f} ms, "
              f"ratio {ratio:.2f}x, target {target or '-'}")


if __name__ == "__main__":
    main()
