"""A running cluster found again from its instances' names (another kernel, after a restart):
its live instances, and its certificate and plan read from the scheduler's instance.

    >>> plan, ids, ours = find(cloud, "trio")  # doctest: +SKIP
    >>> spent = bill_found(plan, ours, ids[0])  # doctest: +SKIP

Choices where nothing says otherwise:

- **Found again.** The cloud has no grouping but names, so a cluster's instances are named
  ``dask-<cluster>-<i>`` (the scheduler's is ``-0``), and a cluster's name is 1 to 40 letters,
  digits, ``.``, ``_`` or ``-`` (a random ``cluster-<hex>`` when none is given). The scheduler's
  instance keeps ``cluster.json`` (offer, region, Python, budget, orphan timer) beside the TLS
  certificate and key. :meth:`GPUCloudCluster.from_name` lists the instances, reads those over
  SSH (whoever can SSH to the instances may use the cluster; nobody else can), reconnects to the
  scheduler and takes its running workers over by their pid files, starting one again where its
  process has gone. Its ``shutdown_on_close`` is false (the end of that process leaves the
  cluster running, as dask-ctl's clusters do), but its ``close()`` deletes the cluster, as
  dask-ctl's ``delete`` expects. ``shutdown_on_close=False`` on the first object keeps the
  cluster past its own process the same way. :mod:`gpucloud_nb.cluster.discovery` is the
  ``dask_cluster_discovery`` entry point dask-ctl reads.
- **Its budget.** A cluster found again with ``from_name`` keeps its budget (from
  ``cluster.json``) and counts what the cluster has cost since it began, not since it was found:
  its live instances from when they turned active, and the instances of its name already deleted
  that were created since its scheduler's instance (an older namesake's are not counted; one first
  seen deleted is billed from its ``createdAt``, an upper bound).
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from distributed.security import Security

from gpucloud_nb.cluster.checks import choose_offer
from gpucloud_nb.cluster.nodes import FOLDER, ClusterPlan, instance_name, parse_instance_name
from gpucloud_nb.errors import InvalidInputError
from gpucloud_nb.models import Instance

if TYPE_CHECKING:
    from gpucloud_nb.client.management import GPUCloud

__all__ = ["bill_found", "find"]


def find(cloud: GPUCloud, name: str) -> tuple[ClusterPlan, dict[int, str], list[tuple[int, Instance]]]:
    """Cluster ``name``'s plan (its certificate, offer, budget…, read from the scheduler's
    instance), its live instances (index → id, each remembered in the plan), and all the listed
    instances of its name with their index; one sentence when no such cluster runs (blocking)."""
    ids: dict[int, str] = {}
    listed = cloud.instances.list()
    ours = [(parsed[1], i) for i in listed
            if (parsed := parse_instance_name(i.name)) and parsed[0] == name]
    for index, instance in ours:
        if instance.status in ("pending", "active"):
            ids[index] = instance.id
    if 0 not in ids:
        also = (f" (instances {', '.join(ids.values())} still run: delete them with "
                "cloud.instances.delete)" if ids else "")
        raise InvalidInputError(f"No running cluster {name!r} on this cloud: no live instance "
                                f"is named {instance_name(name, 0)!r}{also}.")
    read = cloud.instances.run(
        ids[0], f"cd {FOLDER} && cat cluster.json && echo && cat cert.pem key.pem", timeout=60)
    try:
        info = json.loads(read.stdout.split("\n", 1)[0])
        pem = read.stdout.split("\n", 1)[1]
        marker = "-----BEGIN PRIVATE KEY-----"
        cert, key = pem[:pem.index(marker)], pem[pem.index(marker):]
        chosen, region = choose_offer(cloud, str(info["offer"]), 1,
                                      {"region": str(info["region"])})
    except (ValueError, KeyError, IndexError):
        raise InvalidInputError(f"Instance {ids[0]} does not hold the scheduler of a "
                                f"cluster {name!r} this package started.") from None
    security = Security(require_encryption=True, tls_ca_file=cert,
                        tls_client_cert=cert, tls_client_key=key,
                        tls_scheduler_cert=cert, tls_scheduler_key=key,
                        tls_worker_cert=cert, tls_worker_key=key)
    orphan, budget = info.get("orphanSeconds"), info.get("budget")
    plan = ClusterPlan(cloud=cloud, name=name, offer=chosen, region=region,
                       os_image=str(info.get("os") or "ubuntu-22.04"),
                       security=security, python=str(info["python"]),
                       orphan_seconds=float(orphan) if orphan else None,
                       budget=float(budget) if budget else None)
    for index, instance_id in sorted(ids.items()):
        plan.rented(instance_id, instance_name(name, index))
    return plan, ids, ours


def bill_found(plan: ClusterPlan, ours: list[tuple[int, Instance]],
               scheduler_id: str) -> dict[str, float]:
    """What each instance of a cluster found again has cost since the cluster began (instance id
    → dollars): its live instances from when they turned active, and those already gone (a
    scale-down by an earlier object) whose name is the cluster's and that were created since its
    scheduler's instance (an older namesake's are not this cluster's)."""
    moment = datetime.now(timezone.utc)
    began = next(i.created_at for _, i in ours if i.id == scheduler_id)
    spent = {}
    for index, instance in ours:
        if instance.id not in plan.names and (
                began is None or instance.created_at is None or instance.created_at < began):
            continue
        plan.names.setdefault(instance.id, instance_name(plan.name, index))
        spent[instance.id] = plan.ledger.bill(instance, moment).spend
    return spent
