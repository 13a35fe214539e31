"""Benchmark: a class of 40 through a class gateway in front of a sandbox, from one process.

``bench_service`` runs 40 client Python processes on the machine that serves them, so on two
cores their own CPU dominates its p99. Here one process (asyncio + httpx, one connection pool
per student, as separate kernels would have) behaves as the 40 students' sidebars and kernels
against a class gateway as a teacher serves it, ``gpucloud-nb gateway --keys FILE --upstream URL``
in front of a sandbox (``gpucloud-nb sandbox``, state in a SQLite file; the class sandbox of
``sandbox --keys`` gave way to the gateway): each student a key of the keys file with a budget of
$20, and a teacher key:

- the 40 kernels launch one instance each at the same moment, then each reads its instance
  every second until it is active (``wait_until_active``) and every 5 s after;
- the 40 sidebars list every 5 s and read the idle/budget state (``GET /gateway/idle`` where
  the gateway serves it, else ``GET /gateway/budgets``) every 5 s, each student starting at
  its own moment within the first 5 s;
- the teacher's panel reads ``GET /gateway/class`` every 5 s.

Baseline: one student alone, in the same run, against the same server (20 lists, gets and idle
checks, 5 launches). Rows: p50/p95/p99 per route, class vs alone; errors; launches active; and
the CPU the server and the load generator used per request of the class, which a machine shared
with other work does not inflate the way it inflates latencies; and where the get p99 comes from
(:func:`_tail_rows`): the slowest 1 % of gets split by the gateway's ``Server-Timing`` header
into the upstream's part, the gateway's own work and the time outside its app (its loop's queue,
the network, the load generator); a trivial server (``benchmarks._servers``' ``hello``) asked by
the same generator at the same moment as each get, whose p99 is what the generator and the
machine add on their own; the generator loop's delay (a 10 ms sleep probe, p99); one row naming
where the tail comes from (the machine when the trivial server was nearly as late, else the
largest part); and what one burst of 40 gets costs the gateway's one loop (the kernels
launched together, so they poll together: 40 x its CPU per request).
Targets: list/get p99 <= 50 ms, 40 simultaneous launches p99 <= 250 ms, 0 errors.

Then the create path is profiled, in this process, away from the network: its parts timed alone
(the JSON rules, the free SSH port, the SQLite insert in a WAL file, the host key, the SSH
server's listen) and 40 creates through the app, each a row of the table (nothing goes to stderr).
Run standalone with ``python -m benchmarks.bench_class`` (``--quick``: 6 students for 4 s).

The figures below were measured against the class sandbox, before it gave way to the gateway
(28 Nov 2026); the rows now measure the gateway and its upstream together.

Where a create's time went (25 Nov 2026; medians in one process, which a shared machine
disturbs far less than the 40-way run; "was" is the code before the fixes, same machine):

- **Client** (:class:`~gpucloud_nb.GPUCloud`, a create without ``ssh_key`` on the real-cloud
  path): finding the key to send (``client.ssh_keys.identities_sync``) took a thread, a new event
  loop and a parse of every key file on each create: 0.47-0.9 ms quiet, 47-117 ms on a loaded
  machine (the thread waits for a core), which is the 85-93 ms the issue saw. The files are now
  read once per process (again when they change) and, without an ssh-agent, no thread runs:
  0.04 ms. What is left is the HTTP round trip and the change stamp (a few ms in all); the first
  create of a process also imports asyncssh (~0.2 s).
- **Server, per create** (~0.9 ms through the app in-process, of which the ASGI transport and
  Starlette are about half): the SQLite insert ~0.1 ms (one ``BEGIN IMMEDIATE`` transaction in a
  WAL file with ``synchronous=NORMAL``: no fsync per commit, only at checkpoints), the body and
  the create rules ~0.02 ms, the free SSH port ~0.02 ms, a class account's budget check one read
  of its instances (it was two). Over real HTTP, uvicorn's pure-Python h11 parser makes a GET
  cost the server ~0.4 ms of CPU (~0.3 ms with httptools, which uvicorn uses when installed).
- **Host key and SSH server**: never in a request. The reconciler makes the host key (ed25519,
  0.1-0.2 ms) and opens the server (asyncssh's listen, 0.3-0.4 ms, its options built in a worker
  thread) up to a second before the instance turns active; 40 at once are ~40 ms of the loop's
  time on a quiet machine, in one slice per server. It used to open them at the first 0.2 s
  tick *after* the status said active, so a client connecting at once could be refused.
- **Background, with 40 instances active**: the reconciler read and parsed every live
  instance's JSON five times a second (a tick with nothing to open: 0.39 ms); it now reads their
  times only (0.14 ms). The budget watcher reads every instance once a second (~1 ms for 40).
- **List and get**: the framework's time plus ~0.02 ms a row (the stored JSON, the body): 0.6 ms
  of our own for 40 rows; a student's list has one or two.
- 40 at once wait for each other on the server's one event loop: the last of 40 launches or gets
  waits for ~40 x 0.5-1 ms of server CPU, plus whatever the machine's other work takes of it.

Get p99 (28 Nov 2026, two runs each, same machine, loaded by other work at load 15-23 on 2
cores): the server's CPU per request of the class was 1.94-2.11 ms, so one burst of 40 polls
cost its loop 80-84 ms. Three things took CPU from it, and are gone: the idle watcher walked
``/proc`` once a second (~14 ms of CPU, in a thread holding the GIL while the loop answered)
although a class server runs nothing on its instances (shells are off), so it now measures
nothing there; every request compared its key with each of the 41 keys (a dict lookup of the
key's SHA-256 now); and uvicorn formatted and wrote an access-log line per request (a class
server writes none). Now 1.16-1.23 ms a request, one burst of 40 46-49 ms: inside 50 ms on
the server's own core, with no margin left for a machine whose other work takes that core
(p99 260-390 ms at load 21-23; the rows below say how much of it the load generator's own delay
explains). What is left per request is uvicorn's h11 parser, Starlette and asyncio (most of it),
then the SQLite read and the JSON of the body (~0.1 ms each).

Where the get p99 comes from, through the gateway (28 Nov 2026, two runs, load 14.5 and 12.4 on
2 cores): p99 1.01 s and 1.40 s. In its slowest 1 %, the gateway's own work (Server-Timing
``app - upstream``) was 0.36 and 0.34 ms; the rest was waiting: outside the gateway's app 891
and 650 ms, for the upstream 148 and 792 ms, whichever process the machine happened to leave
without a core. A trivial server asked at the same moments by the same generator had a p99 of
949 and 737 ms, and the generator's loop delay p99 was 194 and 101 ms: the tail is the loaded
machine (every process waiting its turn for one of 2 cores), not the gateway's code. The 50 ms
target can only be measured on a machine that is not running other work.

29 Nov 2026, two runs (load 4.9 and 5.1), after the gateway's answers went out in one write and
its meter stopped reading each person's records one by one: get p99 316 and 883 ms; a trivial
server asked at the same moments 314 and 568 ms; the generator's loop delay p99 43 and 98 ms; the
gateway's own work in the slowest 1 % 0.88 and 0.26 ms. The load generator spent 8.5 and 10.6 ms
of CPU per request of the class against the gateway's 1.95 and 2.26 ms: on 2 shared cores this
one process (80 httpx clients) is the busiest, and the tail is the machine's and its.
"""

from __future__ import annotations

import asyncio
import os
import random
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from benchmarks._servers import (
    ManagementProcess,
    ServerProcess,
    cpu_seconds,
    percentile,
    write_keys,
)

__all__ = ["QUICK", "run"]

Row = tuple[str, float, float, float, str, str]
QUICK = {"students": 6, "seconds": 4.0, "profile_creates": 10}
ROOT = Path(__file__).resolve().parents[1]
TEACHER = "bench-teacher-key-0123456789"
UPSTREAM_KEY = "bench-upstream-key-0123456789"
PERIOD = 5.0
LAUNCH_SECONDS = 3.0
_TIMING = re.compile(r"(\w+);dur=([0-9.]+)")


def _serve(folder: Path, students: int) -> tuple[list[ManagementProcess], list[str]]:
    """The upstream sandbox and the class gateway in front of it (keys in the environment and a
    file, never on the command line); the gateway serves the class, so it comes last."""
    keys = [f"bench-student-{n:02d}-key-0123456789" for n in range(students)]
    keys_file = write_keys(folder / "class.txt", keys, 20)
    with keys_file.open("a", encoding="utf-8") as file:
        file.write(f"{TEACHER} teacher the teacher\n")
    env = {**os.environ, "GPUCLOUD_SANDBOX_API_KEY": UPSTREAM_KEY,
           "GPUCLOUD_SANDBOX_INFERENCE_SECRET": "bench-secret-0123456789",
           "GPUCLOUD_UPSTREAM_API_KEY": UPSTREAM_KEY}
    upstream = ManagementProcess(
        [sys.executable, "-m", "gpucloud_nb", "sandbox", "--port", "0", "--state",
         str(folder / "class.db"), "--launch-seconds", str(LAUNCH_SECONDS)], env)
    try:
        gateway = ManagementProcess(
            [sys.executable, "-m", "gpucloud_nb", "gateway", "--keys", str(keys_file),
             "--upstream", upstream.url, "--port", "0", "--home", str(folder / "gateway")], env)
    except BaseException:
        upstream.close()
        raise
    return [upstream, gateway], keys


def _server_timing(response: Any) -> tuple[float, float] | None:
    """(app, upstream) seconds from the gateway's ``Server-Timing`` header, or ``None``."""
    found = dict(_TIMING.findall(response.headers.get("server-timing", "")))
    try:
        return float(found["app"]) / 1e3, float(found["upstream"]) / 1e3
    except (KeyError, ValueError):
        return None


class _Recorder:
    def __init__(self) -> None:
        self.times: dict[str, list[float]] = {}
        #: (the client's time, the gateway app's, the upstream's part of it) per answer that
        #: carried the gateway's Server-Timing header
        self.split: dict[str, list[tuple[float, float, float]]] = {}
        self.errors: list[str] = []
        #: How late the load generator's loop woke for a 10 ms sleep: its own delay, which is in
        #: every request time it measured meanwhile.
        self.lag: list[float] = []

    async def timed(self, route: str, call: Callable[[], Awaitable[Any]],
                    ok: tuple[int, ...] = (200,)) -> Any:
        start = time.perf_counter()
        try:
            response = await call()
        except Exception as error:  # a refused or dropped connection is an error like a 5xx
            self.errors.append(f"{route}: {type(error).__name__}: {error}")
            return None
        finally:
            self.times.setdefault(route, []).append(elapsed := time.perf_counter() - start)
        timing = _server_timing(response)
        if timing is not None:
            self.split.setdefault(route, []).append((elapsed, *timing))
        if response.status_code not in ok:
            self.errors.append(f"{route}: {response.status_code} {response.text[:200]}")
            return None
        return response


def _create_body(offer: dict[str, Any], name: str) -> dict[str, Any]:
    return {"name": name, "cloudProvider": offer["cloud"]["_id"], "instanceId": offer["instanceId"],
            "region": next(a["region"] for a in offer["availability"] if a["available"]),
            "vm": {"os": offer["configuration"]["os"][0]}}


async def _idle_route(client: Any) -> str:
    answer = await client.get("/gateway/idle")
    return "/gateway/idle" if answer.status_code == 200 else "/gateway/budgets"


async def _alone(base: str, key: str, offer: dict[str, Any], idle: str) -> _Recorder:
    import httpx

    rec = _Recorder()
    async with httpx.AsyncClient(base_url=base, headers={"x-api-key": key}, timeout=30,
                                 trust_env=False) as client:
        first = await rec.timed("launch", lambda: client.post(
            "/gpu-cloud/instances", json=_create_body(offer, "alone-0")), ok=(201,))
        for n in range(1, 5):
            await asyncio.sleep(0.05)
            await rec.timed("launch", lambda n=n: client.post(
                "/gpu-cloud/instances", json=_create_body(offer, f"alone-{n}")), ok=(201,))
        own = first.json()["_id"] if first is not None else "missing"
        for _ in range(20):
            await rec.timed("list", lambda: client.get("/gpu-cloud/instances"))
            await rec.timed("get", lambda: client.get(f"/gpu-cloud/instances/{own}"))
            await rec.timed("idle check", lambda: client.get(idle))
            await asyncio.sleep(0.05)
        for item in (await client.get("/gpu-cloud/instances")).json():
            await client.delete(f"/gpu-cloud/instances/{item['_id']}")
    return rec


async def _class(base: str, keys: list[str], offer: dict[str, Any], idle: str,
                 seconds: float, trivial: str) -> tuple[_Recorder, list[str]]:
    import httpx

    rec = _Recorder()
    go = asyncio.Event()
    ids: list[str] = []
    clients = [httpx.AsyncClient(base_url=base, headers={"x-api-key": key}, timeout=30,
                                 trust_env=False) for key in keys]
    trivials = [httpx.AsyncClient(timeout=30, trust_env=False) for _ in keys]
    teacher = httpx.AsyncClient(base_url=base, headers={"x-api-key": TEACHER}, timeout=30,
                                trust_env=False)

    async def kernel(n: int, client: httpx.AsyncClient, end: float) -> None:
        await go.wait()
        made = await rec.timed("launch", lambda: client.post(
            "/gpu-cloud/instances", json=_create_body(offer, f"class-{n}")), ok=(201,))
        if made is None:
            return
        own = made.json()["_id"]
        ids.append(own)
        active = False
        while time.monotonic() < end:
            got, _ = await asyncio.gather(  # and a trivial server, asked at the same moment
                rec.timed("get", lambda: client.get(f"/gpu-cloud/instances/{own}")),
                rec.timed("trivial", lambda: trivials[n].get(trivial)))
            active = active or (got is not None and got.json().get("status") == "active")
            await asyncio.sleep(PERIOD if active else 1.0)

    async def sidebar(client: httpx.AsyncClient, end: float, offset: float) -> None:
        await go.wait()
        await asyncio.sleep(offset)
        while time.monotonic() < end:
            await rec.timed("list", lambda: client.get("/gpu-cloud/instances"))
            await rec.timed("idle check", lambda: client.get(idle))
            await asyncio.sleep(PERIOD)

    async def teacher_panel(end: float) -> None:
        await go.wait()
        while time.monotonic() < end:
            await rec.timed("teacher view", lambda: teacher.get("/gateway/class"))
            await asyncio.sleep(PERIOD)

    async def lag_probe(end: float) -> None:
        await go.wait()
        while time.monotonic() < end:
            start = time.perf_counter()
            await asyncio.sleep(0.01)
            rec.lag.append(max(time.perf_counter() - start - 0.01, 0.0))

    try:
        for client, other in zip(clients, trivials, strict=True):  # connected before the go,
            await client.get("/gateway/me")                        # as open kernels are
            await other.get(trivial)
        end = time.monotonic() + seconds
        rng = random.Random(29)
        tasks = [asyncio.create_task(kernel(n, client, end)) for n, client in enumerate(clients)]
        tasks += [asyncio.create_task(sidebar(client, end, rng.uniform(0, PERIOD)))
                  for client in clients]
        tasks.append(asyncio.create_task(teacher_panel(end)))
        tasks.append(asyncio.create_task(lag_probe(end)))
        await asyncio.sleep(0.1)
        go.set()
        await asyncio.gather(*tasks)
    finally:
        for client in [*clients, *trivials]:
            await client.aclose()
        await teacher.aclose()
    return rec, ids


async def rec_stop(rec: _Recorder, teacher: Any) -> None:
    """The teacher stops the whole class (one request, its time recorded)."""
    await rec.timed("stop the class", lambda: teacher.delete("/gateway/class/instances"))


async def _load(base: str, keys: list[str], seconds: float, pid: int,
                trivial: str) -> tuple[_Recorder, _Recorder, int, str, dict[str, float]]:
    import httpx

    async with httpx.AsyncClient(base_url=base, headers={"x-api-key": keys[0]}, timeout=30,
                                 trust_env=False) as client:
        offer = (await client.get("/gpu-cloud/instances/offers", params={
            "deploymentType": "vm", "available": "true", "sort": "price"})).json()[0]
        idle = await _idle_route(client)
    alone = await _alone(base, keys[0], offer, idle)
    server_before, ours_before = cpu_seconds(pid), time.process_time()
    crowd, ids = await _class(base, keys, offer, idle, seconds, trivial)
    cpu = {"server": cpu_seconds(pid) - server_before,
           "load generator": time.process_time() - ours_before,
           "requests": float(sum(len(times) for route, times in crowd.times.items()
                                 if route != "trivial"))}
    await asyncio.sleep(max(LAUNCH_SECONDS - seconds, 0) + 0.5)
    active = 0
    async with httpx.AsyncClient(base_url=base, headers={"x-api-key": TEACHER}, timeout=120,
                                 trust_env=False) as teacher:
        for key in keys:
            try:
                listed = (await teacher.get("/gpu-cloud/instances",
                                            headers={"x-api-key": key})).json()
            except httpx.HTTPError as error:
                crowd.errors.append(f"final list: {type(error).__name__}: {error}")
                continue
            active += sum(1 for item in listed if item["_id"] in ids and item["status"] == "active")
        await rec_stop(crowd, teacher)
    return alone, crowd, active, idle, cpu


def _profile_parts(n: int) -> list[Row]:
    """The create path's parts, each timed alone n times (ms each, median)."""
    import asyncssh

    from gpucloud_nb.models import InstanceOffer
    from gpucloud_nb.rules import instance_create_problem
    from gpucloud_nb.sandbox.catalogue import instance_offers
    from gpucloud_nb.sandbox.ssh import free_port
    from gpucloud_nb.sandbox.store import Store

    offer = next(o for o in instance_offers() if o["deploymentType"] == "vm"
                 and any(a["available"] for a in o["availability"]))
    body = _create_body(offer, "job")
    folder = Path(tempfile.mkdtemp(prefix="gpucloud-bench-profile-"))
    parts: dict[str, list[float]] = {}

    def timed(name: str, call: Callable[[], Any]) -> Any:
        start = time.perf_counter()
        result = call()
        parts.setdefault(name, []).append(time.perf_counter() - start)
        return result

    store = Store(folder / "state.db")
    keys: list[Any] = []
    try:
        for i in range(n):
            timed("rules (offer record + create rules)", lambda: instance_create_problem(
                body, [InstanceOffer.from_json(offer)], None))
            timed("free SSH port (bind + close)", free_port)
            timed("SQLite insert (WAL file, one transaction)", lambda i=i: store.insert_instance(
                user="u", deployment_type="vm", volume_id=None, created_ms=i, ready_ms=i,
                fails=False, doc={"name": "job", "hourlyPrice": 1.0, "pad": "x" * 600}))
            keys.append(timed("host key (ed25519 generate + write)", lambda i=i: (
                k := asyncssh.generate_private_key("ssh-ed25519"),
                k.write_private_key(str(folder / f"host-{i}")))[0]))

        async def listen() -> None:  # on one running loop, as the server's reconciler does
            for key in keys:
                start = time.perf_counter()
                server = await asyncssh.create_server(asyncssh.SSHServer, "127.0.0.1", 0,
                                                      server_host_keys=[key])
                parts.setdefault("SSH server listen (asyncssh.create_server)", []).append(
                    time.perf_counter() - start)
                server.close()
                await server.wait_closed()

        asyncio.run(listen())
    finally:
        store.close()
        shutil.rmtree(folder, ignore_errors=True)
    return [(f"class: create profile, {name}, ms each (median of {n})",
             percentile(times, 50), float("nan"), float("nan"), "", "s")
            for name, times in parts.items()]


def _profile_app(n: int) -> list[Row]:
    """n creates through the app in this process (no network, no lifespan)."""
    import httpx

    from gpucloud_nb.sandbox import SandboxConfig
    from gpucloud_nb.sandbox.app import create_app

    folder = Path(tempfile.mkdtemp(prefix="gpucloud-bench-profile-"))
    app = create_app(SandboxConfig(api_key="bench-key-0123456789", state=folder / "s.db"))

    async def creates() -> list[float]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1",
                                     headers={"x-api-key": "bench-key-0123456789"}) as client:
            offer = (await client.get("/gpu-cloud/instances/offers", params={
                "deploymentType": "vm", "available": "true", "sort": "price"})).json()[0]
            times = []
            for i in range(n):
                start = time.perf_counter()
                answer = await client.post("/gpu-cloud/instances",
                                           json=_create_body(offer, f"p-{i}"))
                times.append(time.perf_counter() - start)
                assert answer.status_code == 201, answer.text
            return times

    try:
        times = asyncio.run(creates())
    finally:
        app.state.store.close()
        shutil.rmtree(folder, ignore_errors=True)
    return [(f"class: create through the app in-process, no network (median of {n})",
             percentile(times, 50), float("nan"), float("nan"), "", "s")]


def _profile_client(base: str, key: str, n: int) -> list[Row]:
    """n creates through :class:`~gpucloud_nb.GPUCloud` (its checks included)."""
    from gpucloud_nb import GPUCloud

    with GPUCloud(api_key=key, base_url=base, max_retries=0) as cloud:
        offer = cloud.instances.offers(deployment_type="vm", available=True, sort="price")[0]
        times: list[float] = []

        def creates() -> None:
            for i in range(n):
                start = time.perf_counter()
                cloud.instances.create(name=f"client-{i}", cloud_provider=offer.cloud.id,
                                       instance_id=offer.instance_id,
                                       region=offer.available_regions[0],
                                       vm={"os": offer.configuration.os[0]})
                times.append(time.perf_counter() - start)

        creates()
    return [(f"class: create from GPUCloud alone, client checks included (median of {n})",
             percentile(times, 50), float("nan"), float("nan"), "", "s")]


def _tail_rows(crowd: _Recorder, cpu: dict[str, float], students: int) -> list[Row]:
    """Where the get p99 comes from, each part a row, then one row naming the largest.

    Each get's time as the load generator saw it is split by the gateway's ``Server-Timing``
    header (:mod:`gpucloud_nb.gateway.timing`) into the upstream's part, the gateway's own work
    and what was spent outside its app: waiting for the gateway's one event loop (other requests
    ahead, or the machine giving its process no core), the network and the load generator. The
    slowest 1 % of gets are averaged part by part. What the generator and the machine add alone
    is read from a trivial server (a fixed answer) asked by the same generator at the same
    moments as each get: its p99, and the generator loop's own delay (a 10 ms sleep probe)."""
    get_p99 = percentile(crowd.times.get("get", []), 99)
    lag_p99 = percentile(crowd.lag, 99)
    trivial_p99 = percentile(crowd.times.get("trivial", []), 99)
    load, cores = os.getloadavg()[0], os.cpu_count() or 1
    server_ms = cpu["server"] / max(cpu["requests"], 1.0)
    split = crowd.split.get("get", [])
    cut = percentile([total for total, _, _ in split], 99)
    slow = [row for row in split if row[0] >= cut] or [(float("nan"),) * 3]
    outside, own, upstream = (
        sum(parts) / len(slow) for parts in zip(*((t - a, a - u, u) for t, a, u in slow),
                                                strict=True))

    def of(value: float) -> float:
        return value / get_p99 if get_p99 else float("nan")

    machine = f"machine load {load:.1f} on {cores} cores{' (loaded)' if load > cores else ''}"
    largest = max(outside, own, upstream)
    if trivial_p99 >= get_p99 / 2:  # a server doing nothing was nearly as late: no code is
        source = ("the machine and the load generator (a trivial server asked at the same "
                  "moments was nearly as late: its p99 here)")
        largest = trivial_p99
    elif outside >= max(own, upstream):
        source = ("waiting for the gateway's event loop (requests ahead of it, or no core for "
                  "its process; a trivial server's answers were not as late)")
    elif own >= upstream:
        source = "the gateway's own work inside its app"
    else:
        source = "the upstream sandbox (as the gateway waited for it)"
    burst = students * server_ms  # the kernels launched together, so they poll together
    n = f"the slowest 1 % of gets ({len(slow)} of {len(split)}), mean"
    return [
        (f"class: get p99 split, {n}: outside the gateway's app (its loop's queue, network, "
         "load generator)", outside, get_p99, of(outside), "", "s"),
        (f"class: get p99 split, {n}: the gateway's own work (Server-Timing app - upstream)",
         own, get_p99, of(own), "", "s"),
        (f"class: get p99 split, {n}: the upstream sandbox (Server-Timing upstream)",
         upstream, get_p99, of(upstream), "", "s"),
        (f"class: trivial server p99, same generator, same moments "
         f"({len(crowd.times.get('trivial', []))} requests)", trivial_p99, get_p99,
         of(trivial_p99), "", "s"),
        (f"class: load generator's loop delay p99 ({len(crowd.lag)} probes of 10 ms)", lag_p99,
         get_p99, of(lag_p99), "", "s"),
        (f"class: get p99's tail comes mostly from {source}; {machine}; gateway CPU "
         f"{server_ms * 1e3:.2f} ms a request", largest, get_p99, of(largest), "", "s"),
        (f"class: {students} gets at once (kernels launched together poll together) queued on "
         f"the gateway's one loop: {students} x its CPU per request, on a core of its own",
         burst, get_p99, of(burst), "", "s"),
    ]


def run(students: int = 40, seconds: float = 20.0, profile_creates: int = 40) -> list[Row]:
    """Per-route percentiles of ``students`` simulated students, next to one student alone."""
    folder = Path(tempfile.mkdtemp(prefix="gpucloud-bench-class-"))
    servers, keys = _serve(folder, students)
    base = servers[-1].url
    hello = ServerProcess("hello")  # the trivial server: a fixed answer, nothing else
    try:
        alone, crowd, active, idle, cpu = asyncio.run(_load(
            base, keys, seconds, servers[-1].process.pid, hello.url + "/hello"))
        client_rows = _profile_client(base, keys[-1], max(profile_creates // 4, 3))
    finally:
        hello.close()
        for server in reversed(servers):
            server.close()
        shutil.rmtree(folder, ignore_errors=True)
    if crowd.errors or alone.errors:
        first = (crowd.errors + alone.errors)[0]
        print(f"bench_class: {len(crowd.errors)} errors, first: {first}", file=sys.stderr)
    rows: list[Row] = []
    targets = {"list": "<= 50 ms", "get": "<= 50 ms", "launch": "<= 250 ms"}
    for route in ("list", "get", "idle check", "launch", "teacher view", "stop the class"):
        ours = crowd.times.get(route, [])
        mine = alone.times.get(route, [])
        label = f"{route} (GET {idle})" if route == "idle check" else route
        how = f"{students} at once" if route == "launch" else f"{students} students"
        for q in ((50, 95, 99) if len(ours) > 1 else (50,)):
            value, base_q = percentile(ours, q), percentile(mine, q)
            rows.append((f"class: {label} p{q}, {how} vs 1 alone ({len(ours)} requests)", value,
                         base_q, value / base_q if mine and base_q else float("nan"),
                         targets.get(route, "") if q == 99 else "", "s"))
    rows.append((f"class: errors, {students} students vs 1", float(len(crowd.errors)),
                 float(len(alone.errors)), float("nan"), "<= 0", ""))
    rows.append((f"class: launches active of {students} at once", float(active), float(students),
                 active / students, ">= 1x", ""))
    for who in ("server", "load generator"):
        rows.append((f"class: {who} CPU per request of the class ({cpu['requests']:.0f} requests,"
                     f" {cpu[who]:.2f} s in all)", cpu[who] / max(cpu["requests"], 1.0),
                     float("nan"), float("nan"), "", "s"))
    rows += _tail_rows(crowd, cpu, students)
    rows += client_rows
    rows += _profile_parts(max(profile_creates // 4, 3))
    rows += _profile_app(profile_creates)
    return rows


if __name__ == "__main__":
    for row in run(**(QUICK if "--quick" in sys.argv else {})):
        print(row)
