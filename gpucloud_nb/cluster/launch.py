"""The start of a new cluster: its instances created, waited for with one progress line and
made ready for Dask over SSH, each that fails named and dropped while the others go on.

    >>> ids = launch(plan, 3, timeout=900, notice=print)  # doctest: +SKIP
    trio: 3/3 instances of cirrus-l4-1x-vm active in ap-southeast-1 (41 s)

Choices where nothing says otherwise:

- **A start that fails.** An instance other than the scheduler's that turns ``error``, is not
  active within ``timeout``, does not answer over SSH within 30 s of the instances being active,
  or cannot run Dask, is named with its reason in ``cluster.notices`` as soon as that is known,
  deleted, and the cluster starts without it. The scheduler's instance failing fails the start
  in one sentence, every instance deleted.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from gpucloud_nb.cluster.nodes import ClusterPlan, instance_name
from gpucloud_nb.errors import GPUCloudError, InstanceFailedError

__all__ = ["REACH_SECONDS", "drop", "launch"]

REACH_SECONDS = 30.0  # an active instance must answer over SSH this soon


def launch(plan: ClusterPlan, n: int, timeout: float,
           notice: Callable[[str], None]) -> dict[int, str]:
    """Create the ``n`` instances, wait for them with one progress line, check Dask on each;
    instance ``i`` → its id. An instance other than the scheduler's that fails (its status
    ``error``, not active within ``timeout``, not reachable over SSH within
    ``REACH_SECONDS`` of the others being active, or without Dask) is named through
    ``notice`` and deleted, and the others go on; the scheduler's failing fails the start."""
    cloud = plan.cloud
    ids = {i: plan.create(i) for i in range(n)}
    started = time.monotonic()
    shown = ""
    waiting = dict(ids)
    while waiting:
        listed = [i for i in cloud.instances.list() if i.id in plan.names]
        for instance in listed:
            plan.ledger.observe(instance)  # when each turned active, for the budget
        statuses = {i.id: i.status for i in listed}
        for index, instance_id in list(waiting.items()):
            status = statuses.get(instance_id, "deleted")
            if status == "active":
                del waiting[index]
            elif status in ("error", "deleting", "deleted"):
                drop(plan, ids, index, notice, f"is {status}")
                del waiting[index]
            elif time.monotonic() - started > timeout:
                drop(plan, ids, index, notice, f"was not active after {timeout:g} s")
                del waiting[index]
        active = sum(statuses.get(i) == "active" for i in ids.values())
        line = (f"\r{plan.name}: {active}/{len(ids)} instances of {plan.offer.instance_id} "
                f"active in {plan.region} ({time.monotonic() - started:.0f} s)")
        if line != shown:
            print(line, end="", flush=True)
            shown = line
        if waiting:
            time.sleep(0.25)
    print(flush=True)
    pool = ThreadPoolExecutor(max_workers=len(ids), thread_name_prefix="gpucloud-cluster")
    reached = {index: threading.Event() for index in ids}
    jobs = {index: pool.submit(plan.prepare, instance_id, reached[index])
            for index, instance_id in ids.items()}
    deadline = time.monotonic() + REACH_SECONDS
    for index, job in jobs.items():
        while not (reached[index].is_set() or job.done()) and time.monotonic() < deadline:
            time.sleep(0.1)
        if not (reached[index].is_set() or job.done()):
            drop(plan, ids, index, notice, "is active but was not reachable over SSH "
                                            f"within {REACH_SECONDS:g} s")
    for index, job in jobs.items():
        if index not in ids:
            continue
        try:
            job.result()
        except GPUCloudError as error:
            drop(plan, ids, index, notice, f"could not run Dask: {error}")
    pool.shutdown(wait=False)
    return ids


def drop(plan: ClusterPlan, ids: dict[int, str], index: int, notice: Callable[[str], None],
         why: str) -> None:
    """Instance ``index`` failed while the cluster starts: the scheduler's fails the start;
    another is named, deleted and dropped from ``ids``."""
    instance_id = ids[index]
    named = f"Instance {instance_id} ({instance_name(plan.name, index)})"
    if index == 0:
        raise InstanceFailedError(f"{named}, which was to hold the scheduler of cluster "
                                  f"{plan.name!r}, {why}; the cluster's instances are being "
                                  "deleted.")
    del ids[index]
    plan.gone.add(instance_id)
    threading.Thread(target=_delete_dropped, args=(plan, instance_id, named, notice), daemon=True,
                     name="gpucloud-cluster-delete").start()  # the start goes on meanwhile
    notice(f"{named} of cluster {plan.name!r} {why}: it is deleted, and the cluster "
                 f"starts with {len(ids)} workers.")


def _delete_dropped(plan: ClusterPlan, instance_id: str, named: str,
                    notice: Callable[[str], None]) -> None:
    """Delete an instance dropped while the cluster starts, and say so if the cloud does not
    confirm it (``close`` tries again)."""
    try:
        confirmed = plan.delete(instance_id)
    except GPUCloudError as error:
        notice(f"{named} of cluster {plan.name!r} could not be deleted: {error}")
        return
    if not confirmed:
        notice(f"{named} of cluster {plan.name!r} was not confirmed deleted; "
                     "check cloud.instances.list().")
