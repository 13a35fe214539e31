"""``adapt`` on a :class:`~gpucloud_nb.cluster.GPUCloudCluster`: Dask's own ``Adaptive``, except
that it never retires the worker beside the scheduler.

    >>> cluster.adapt(minimum=1, maximum=4)  # uses KeepsSchedulerWorker  # doctest: +SKIP

Choices where nothing says otherwise:

- **The first instance** holds the scheduler and a worker. That worker costs nothing of its
  own (the instance bills for the scheduler anyway), so ``adapt`` never retires it: Dask would
  pick the worker with the least data, often that one, and leave its instance billing beside
  the other's; ours retires another in its place. ``scale`` drops the newest workers first, so
  that worker last, and a scale-up that finds no worker beside the scheduler starts one there
  before renting. The instance goes at ``close``.
- **Adapt within a budget.** ``adapt(minimum, maximum)`` is Dask's own: it asks for at most
  ``maximum`` workers, counting those still starting. With ``budget=``, each scale-up must also
  leave the budget able to pay what the cluster has cost so far and one more hour of all its
  instances (the one-hour rule of a class budget): ``scale`` refuses in one sentence, and of the
  workers ``adapt`` asks for at once the first that fit start and the rest are named once and
  dropped.
"""

from __future__ import annotations

from typing import Any

from distributed.deploy.adaptive import Adaptive

__all__ = ["KeepsSchedulerWorker"]


class KeepsSchedulerWorker(Adaptive):
    """Dask's ``Adaptive``, except that where the scheduler would retire the worker beside it
    (the cluster's ``home_worker()``), the next candidate goes instead (see the module docs).

        >>> cluster.adapt(KeepsSchedulerWorker, minimum=1, maximum=4)  # doctest: +SKIP
    """

    async def workers_to_close(self, target: int) -> list[str]:
        names = await super().workers_to_close(target)
        home_worker = getattr(self.cluster, "home_worker", None)
        home: Any = home_worker() if callable(home_worker) else None
        if home is None or home not in names:
            return names
        wider = names if target == 0 else await super().workers_to_close(target - 1)
        return [name for name in wider if name != home][:len(names)]
