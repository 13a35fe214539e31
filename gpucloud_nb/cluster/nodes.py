"""The scheduler and the workers of a :class:`~gpucloud_nb.cluster.GPUCloudCluster`, each a Dask
``ProcessInterface`` driven over the client's SSH layer (``cloud.instances.run``/``upload``/
``forward``), in the style of dask-cloudprovider's ``VMInterface``.

    >>> worker = WorkerNode("tls://10.0.0.5:40001", plan=plan, name=3)  # doctest: +SKIP
    >>> await worker  # rents an instance, starts `dask worker`, waits for it  # doctest: +SKIP

On an instance the cluster keeps its files in ``~/gpucloud-cluster`` (mode 0700): the TLS
certificate and key, ``scheduler.json``, ``cluster.json`` (on the scheduler's instance: the
offer, region and Python the cluster rents with, for :meth:`GPUCloudCluster.from_name`), one log
and one pid file per process and Dask's scratch space. Processes start detached (``nohup … &``)
so that the SSH session that starts them can end; a node given ``adopt=True`` (a cluster found
again by name) takes over the process its pid file names when it still runs.

Instances are named ``dask-<cluster>-<i>``: the scheduler and worker 0 on ``dask-<cluster>-0``,
worker ``i`` on ``dask-<cluster>-<i>`` (:func:`instance_name`, :func:`parse_instance_name`):
the cloud keeps no other grouping, so the names are how a cluster is found again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shlex
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import distributed
from distributed.core import Status
from distributed.deploy.spec import ProcessInterface

from gpucloud_nb.client import clusters
from gpucloud_nb.client.billing import Ledger
from gpucloud_nb.errors import GPUCloudError, InstanceFailedError, NotFoundError

if TYPE_CHECKING:
    from distributed.security import Security

    from gpucloud_nb.client.management import GPUCloud
    from gpucloud_nb.models import InstanceOffer

__all__ = ["FOLDER", "ClusterPlan", "SchedulerNode", "WorkerNode", "blocking", "instance_name",
           "parse_instance_name", "worker_command"]

#: Where the cluster's files live on each instance (relative to its home).
FOLDER = "gpucloud-cluster"
_START_SECONDS = 120  # how long a process may take to be ready (a pip install takes longer)
_GONE = ("deleting", "deleted", "error")
_CONFIRM_SECONDS = 120.0  # a delete not seen done by then is named
_RESEND_SECONDS = 10.0  # a delete that left the instance pending or active is sent again
_NAME = re.compile(r"dask-(?P<cluster>[A-Za-z0-9_.-]+)-(?P<index>[0-9]+)")


def instance_name(cluster: str, index: int) -> str:
    """The name of a cluster's ``index``-th instance.

        >>> instance_name("trio", 2)
        'dask-trio-2'
    """
    return f"dask-{cluster}-{index}"


def parse_instance_name(name: str) -> tuple[str, int] | None:
    """``(cluster, index)`` of an instance named by :func:`instance_name`, else ``None``.

        >>> parse_instance_name("dask-my-run-3"), parse_instance_name("notebook")
        (('my-run', 3), None)
    """
    match = _NAME.fullmatch(name)
    return (match["cluster"], int(match["index"])) if match else None


@dataclass
class ClusterPlan:
    """What every node of one cluster shares: the client, the offer and region, TLS, and the
    instances rented so far (so that ``close`` can delete them all, even half-started ones)."""

    cloud: GPUCloud
    name: str
    offer: InstanceOffer
    region: str
    os_image: str
    security: Security
    python: str = "python3"
    orphan_seconds: float | None = None  # the instances' orphan timer (see spec.py)
    budget: float | None = None  # the whole cluster's, in dollars (see spec.py)
    admit: Callable[[Any], str | None] | None = None  # a new worker's name -> a refusal, or None
    instance_ids: list[str] = field(default_factory=list)
    names: dict[str, str] = field(default_factory=dict)  # instance id -> instance name
    cuda: set[str] = field(default_factory=set)  # instances with dask-cuda
    gone: set[str] = field(default_factory=set)  # deleted from outside: nothing to stop there
    confirmed: set[str] = field(default_factory=set)  # deletes the cloud showed
    keep: bool = False  # a cluster not found again: closing it stops and deletes nothing
    ledger: Ledger = field(default_factory=Ledger)  # when each instance turned active
    _files: tempfile.TemporaryDirectory[str] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def rented(self, instance_id: str, instance_name: str) -> None:
        """Remember an instance of the cluster as soon as it is created."""
        with self._lock:
            self.instance_ids.append(instance_id)
            self.names[instance_id] = instance_name
        clusters.note(self.cloud.base_url, instance_id, self.name)  # for the Lab sidebar

    def create(self, index: int) -> str:
        """Rent the cluster's ``index``-th instance of the plan's offer (blocking); its id."""
        name = instance_name(self.name, index)
        instance = self.cloud.instances.create(
            name=name, cloud_provider=self.offer.cloud.id,
            instance_id=self.offer.instance_id, region=self.region, vm={"os": self.os_image})
        self.rented(instance.id, name)
        return instance.id

    def guard(self, instance_id: str) -> None:
        """Give a started instance its orphan timer, or start it again: an auto-delete timer of
        ``orphan_seconds`` (``cloud.auto_delete``, kept by the sandbox service or the gateway
        whether or not this process lives), set once its Dask process runs (an instance still
        starting is never an orphan) and renewed by every live cluster object that holds it."""
        if self.orphan_seconds is not None and not self.keep:
            self.cloud.auto_delete.schedule(instance_id, self.orphan_seconds)

    def info(self) -> dict[str, object]:
        """What :meth:`GPUCloudCluster.from_name` needs to rent more of the same: kept in
        ``cluster.json`` on the scheduler's instance."""
        return {"cluster": self.name, "offer": self.offer.instance_id,
                "provider": self.offer.cloud.id, "region": self.region, "os": self.os_image,
                "python": self.python, "orphanSeconds": self.orphan_seconds,
                "budget": self.budget}

    def tls_files(self) -> tuple[Path, Path]:
        """The certificate and key as local files (mode 0600, in a private temporary folder),
        for uploading; made once per cluster, removed by :meth:`forget_files`."""
        with self._lock:
            if self._files is None:
                self._files = tempfile.TemporaryDirectory(prefix="gpucloud-cluster-")
                folder = Path(self._files.name)
                tls = self.security.get_tls_config_for_role("scheduler")  # one pair for all
                for filename, text in (("cert.pem", tls["cert"]), ("key.pem", tls["key"])):
                    path = folder / filename
                    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                    with os.fdopen(descriptor, "w") as file:
                        file.write(str(text))
            folder = Path(self._files.name)
        return folder / "cert.pem", folder / "key.pem"

    def forget_files(self) -> None:
        """Remove the local copies of the certificate and key."""
        with self._lock:
            if self._files is not None:
                self._files.cleanup()
                self._files = None

    def delete(self, instance_id: str, within: float = _CONFIRM_SECONDS) -> bool:
        """Delete one instance of the cluster unless it is already going, and confirm it: the
        cloud must show it ``deleted`` (it bills while ``deleting``) within ``within`` seconds;
        the delete is sent once more if it still shows pending or active after 10 s (a cloud
        that took it and did nothing). Blocking; whether it was confirmed."""
        if self.keep:
            return True
        instances = self.cloud.instances
        deadline = time.monotonic() + within
        resend = time.monotonic() + min(within / 2, _RESEND_SECONDS)
        sent = False
        try:
            while True:
                status = instances.get(instance_id).status
                if status == "deleted":
                    break
                if status != "deleting" and (not sent or time.monotonic() > resend):
                    if sent:
                        resend = deadline
                    instances.delete(instance_id)
                    sent = True
                if time.monotonic() > deadline:
                    return False
                time.sleep(0.25)
        except NotFoundError:
            pass
        with self._lock:
            self.confirmed.add(instance_id)
        clusters.forget(self.cloud.base_url, instance_id)
        return True

    def prepare(self, instance_id: str, reached: threading.Event | None = None) -> None:
        """Make the folder, upload the TLS files and see that Dask is there (installing the
        client's ``distributed`` version if not); note whether ``dask-cuda`` is. ``reached`` is
        set once the instance answered over SSH."""
        cert, key = self.tls_files()
        run = self.cloud.instances.run
        py = self.python
        result = run(instance_id, f"mkdir -p -m 700 {FOLDER} && chmod 700 {FOLDER}; "
                     f"{py} -c 'import sys' >/dev/null 2>&1 || echo no-python; "
                     f"{py} -c 'import distributed; print(distributed.__version__)' 2>/dev/null; "
                     f"{py} -c 'import dask_cuda' >/dev/null 2>&1 && echo dask-cuda", timeout=60)
        if reached is not None:
            reached.set()
        lines = result.stdout.split()
        if "no-python" in lines:
            raise InstanceFailedError(f"Instance {instance_id} has no working {py}, so it cannot "
                                      "run Dask; use an image with Python 3.")
        if distributed.__version__ not in lines:
            wanted = f"distributed=={distributed.__version__}"
            print(f"Installing {wanted} on instance {instance_id} (pip install --user)…",
                  flush=True)
            installed = run(instance_id, f"{py} -m pip install --user --progress-bar off -q "
                            f"{shlex.quote(wanted)}", timeout=900)
            if not installed.ok:
                why = (installed.stderr.strip().splitlines() or ["no output"])[-1]
                raise InstanceFailedError(
                    f"Dask could not be installed on instance {instance_id} ({py} -m pip "
                    f"install --user {wanted}): {why}")
        for local in (cert, key):
            self.cloud.instances.upload(instance_id, local, f"{FOLDER}/{local.name}")
        run(instance_id, f"chmod 600 {FOLDER}/key.pem", timeout=30)
        if "dask-cuda" in lines:
            with self._lock:
                self.cuda.add(instance_id)

    def tls_options(self) -> str:
        """The TLS options of a Dask command run in :data:`FOLDER`."""
        return "--tls-ca-file cert.pem --tls-cert cert.pem --tls-key key.pem"


def worker_command(python: str, scheduler: str, *, host: str, name: object, gpus: int,
                   cuda: bool, tls: str) -> str:
    """The command that starts one worker, run in :data:`FOLDER` on its instance.

    ``dask cuda worker`` (dask-cuda's ``CUDAWorker``: one worker per GPU, each with ``GPU=1``)
    where :meth:`ClusterPlan.prepare` found ``import dask_cuda`` working, else ``dask worker``
    with ``GPU=<the instance's GPU count>``. With ``--no-dashboard`` a worker still serves
    ``/health`` and ``/metrics`` over plain HTTP, on every interface unless told otherwise:
    ``--dashboard-address 127.0.0.1:0`` keeps that server on the instance's loopback.

        >>> worker_command("python3", "tls://10.0.0.5:8786", host="10.0.0.6", name=1, gpus=4,
        ...                cuda=False, tls="--tls-ca-file cert.pem")
        'python3 -m dask worker tls://10.0.0.5:8786 --host 10.0.0.6 --name 1 --resources GPU=4 ...'
    """
    kind, resources = ("cuda worker", "GPU=1") if cuda else ("worker", f"GPU={gpus}")
    return (f"{python} -m dask {kind} {shlex.quote(scheduler)} --host {shlex.quote(host)} "
            f"--name {shlex.quote(str(name))} --resources {resources} --no-dashboard "
            f"--dashboard-address 127.0.0.1:0 {tls} "
            f"--local-directory {shlex.quote(f'worker-{name}')} --death-timeout 60")


def _detached(command: str, log: str, ready: str, seconds: float = _START_SECONDS, *,
              adopt: bool = False) -> str:
    """Start ``command`` detached, its pid kept in ``<log without .log>.pid``, then wait (on the
    instance, one SSH round trip) until the shell test ``ready`` holds or the process ends; print
    ``pid=<n>`` and ``ready`` or the log's last lines. With ``adopt`` a process the pid file
    names that still runs, and is ready, is taken instead of starting one."""
    tries = int(seconds * 10)
    pidfile = shlex.quote(log.removesuffix(".log") + ".pid")
    start = (f"DASK_TEMPORARY_DIRECTORY=\"$PWD/scratch\" "
             f"nohup {command} > {log} 2>&1 < /dev/null & pid=$!; echo $pid > {pidfile}; ")
    if adopt:
        start = (f"pid=$(cat {pidfile} 2>/dev/null); if [ -n \"$pid\" ] && kill -0 \"$pid\" "
                 f"2>/dev/null && {ready}; then :; else {start}fi; ")
    return (f"cd {FOLDER} || exit 1; {start}"
            f"echo pid=$pid; i=0; while [ $i -lt {tries} ]; do {ready} && break; "
            f"kill -0 $pid 2>/dev/null || break; sleep 0.1; i=$((i+1)); done; "
            f"if {ready}; then echo ready; else echo not-ready; tail -n 5 {log}; fi")


def _started(result_stdout: str, what: str, instance_id: str) -> int:
    """The pid a :func:`_detached` command printed, or one sentence why the process is not up."""
    lines = result_stdout.splitlines()
    pid = next((int(line[4:]) for line in lines if line.startswith("pid=")), 0)
    if "ready" in lines and pid:
        return pid
    after = lines[lines.index("not-ready") + 1:] if "not-ready" in lines else []
    last = next((line.strip() for line in reversed(after) if line.strip()), "no output")
    raise InstanceFailedError(f"The Dask {what} on instance {instance_id} did not start: {last}")


async def blocking(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run one blocking client call off the cluster's event loop; at interpreter exit, when no
    thread can start any more (a cluster closed by the exit hooks), on it."""
    try:
        return await asyncio.to_thread(function, *args, **kwargs)
    except RuntimeError as error:
        if "shutdown" not in str(error):
            raise
    return function(*args, **kwargs)


class SchedulerNode(ProcessInterface):
    """``dask scheduler`` on the cluster's first instance, reached through SSH forwards.

    ``address`` is where the workers reach it (the instance's ip); ``external_address`` is the
    local end of the forward this client uses; ``dashboard_url`` the dashboard's.
    """

    def __init__(self, *, plan: ClusterPlan, instance_id: str, adopt: bool = False) -> None:
        super().__init__()
        self.plan = plan
        self.instance_id = instance_id
        self.adopt = adopt
        self.pid = 0
        self.dashboard_url = ""
        self._forwards = contextlib.ExitStack()

    async def start(self) -> None:
        plan = self.plan
        details = await blocking(plan.cloud.instances.get, self.instance_id)
        command = (f"{plan.python} -m dask scheduler --host {details.ip} --port 0 --protocol tls "
                   f"{plan.tls_options()} --dashboard-address 127.0.0.1:0 "
                   f"--scheduler-file scheduler.json")
        info = shlex.quote(json.dumps(plan.info()))
        script = ("" if self.adopt else f"rm -f {FOLDER}/scheduler.json; "
                  f"printf '%s' {info} > {FOLDER}/cluster.json; ") + _detached(
            command, "scheduler.log", "[ -s scheduler.json ]", adopt=self.adopt) \
            + "; cat scheduler.json 2>/dev/null"
        result = await blocking(plan.cloud.instances.run, self.instance_id, script,
                                 timeout=_START_SECONDS + 30)
        self.pid = _started(result.stdout, "scheduler", self.instance_id)
        info = json.loads(result.stdout[result.stdout.index("{"):])
        self.address = str(info["address"])
        port = int(self.address.rsplit(":", 1)[1])
        local = await blocking(self._forward, port)
        self.external_address = f"tls://127.0.0.1:{local.rsplit(':', 1)[1]}"
        dashboard = (info.get("services") or {}).get("dashboard")
        if dashboard:
            self.dashboard_url = await blocking(self._forward, int(dashboard))
        await super().start()

    def _forward(self, port: int) -> str:
        # bookkeeping: an open Dask client is not use; its tasks are (CPU/GPU on the workers)
        return self._forwards.enter_context(self.plan.cloud.instances.forward(
            self.instance_id, port, bookkeeping=True))

    async def close(self) -> None:
        self.status = Status.closing
        plan = self.plan
        await blocking(self._forwards.close)
        if self.pid and self.instance_id not in plan.gone and not plan.keep:
            with contextlib.suppress(GPUCloudError):
                await blocking(plan.cloud.instances.run, self.instance_id,
                                f"kill {self.pid} 2>/dev/null", timeout=15, wait=0)
        with contextlib.suppress(GPUCloudError):
            await blocking(plan.delete, self.instance_id)
        await super().close()


class WorkerNode(ProcessInterface):
    """``dask worker`` (``dask cuda worker`` where dask-cuda is installed) on one instance.

    Given no ``instance_id`` it rents one (scaling up); it deletes the instance when closed
    unless ``owns_instance`` is false (the scheduler's instance outlives its worker).
    """

    def __init__(self, scheduler: str, *, plan: ClusterPlan, name: Any,
                 instance_id: str | None = None, owns_instance: bool = True,
                 adopt: bool = False) -> None:
        super().__init__(scheduler=scheduler, name=name)
        self.scheduler = scheduler
        self.plan = plan
        self.name = name
        self.instance_id = instance_id
        self.owns_instance = owns_instance
        self.adopt = adopt
        self.pid = 0

    async def start(self) -> None:
        plan = self.plan
        if self.instance_id is None:
            refused = plan.admit(self.name) if plan.admit is not None else None
            if refused:
                raise InstanceFailedError(refused)
            self.instance_id = await blocking(plan.create, int(self.name))
            active = await blocking(plan.cloud.instances.wait_until_active, self.instance_id)
            plan.ledger.observe(active)
            await blocking(plan.prepare, self.instance_id)
        details = await blocking(plan.cloud.instances.get, self.instance_id)
        gpus = max(1, int(details.gpu_count or plan.offer.gpu_count or 1))
        log = f"worker-{self.name}.log"
        command = worker_command(plan.python, self.scheduler, host=details.ip, name=self.name,
                                 gpus=gpus, cuda=self.instance_id in plan.cuda,
                                 tls=plan.tls_options())
        ready = f"grep -q 'Registered to' {log}"
        result = await blocking(plan.cloud.instances.run, self.instance_id,
                                 ("" if self.adopt else f"rm -f {FOLDER}/{log}; ")
                                 + _detached(command, log, ready, adopt=self.adopt),
                                 timeout=_START_SECONDS + 30)
        self.pid = _started(result.stdout, "worker", self.instance_id)
        await blocking(plan.guard, self.instance_id)
        self.address = self.scheduler
        await super().start()

    async def close(self) -> None:
        self.status = Status.closing
        plan = self.plan
        if self.instance_id is not None:
            if self.pid and self.instance_id not in plan.gone and not plan.keep:
                with contextlib.suppress(GPUCloudError):
                    await blocking(plan.cloud.instances.run, self.instance_id,
                                    f"kill {self.pid} 2>/dev/null", timeout=15, wait=0)
            if self.owns_instance:
                with contextlib.suppress(GPUCloudError):
                    await blocking(plan.delete, self.instance_id)
        await super().close()
