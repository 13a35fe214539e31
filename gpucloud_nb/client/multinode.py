"""One command on several instances at once, each told its rank: for torchrun, DeepSpeed, MPI.

    >>> results = run_all(cloud.instances, [a.id, b.id], "torchrun --nnodes $GPUCLOUD_NUM_NODES "
    ...                   "--node_rank $GPUCLOUD_NODE_RANK --master_addr $MASTER_ADDR train.py",
    ...                   on_output=print)  # doctest: +SKIP
    [0] step 1 loss 2.31
    [1] step 1 loss 2.29

Every node gets, as SkyPilot sets them for a multi-node task:

- ``GPUCLOUD_NODE_RANK``: its place in ``ids``, from 0;
- ``GPUCLOUD_NUM_NODES``: how many nodes run the command;
- ``GPUCLOUD_NODE_IPS``: the nodes' addresses (the instances' ``ip``), one a line, in rank order;
- ``MASTER_ADDR`` / ``MASTER_PORT``: rank 0's address and ``master_port`` (29500, torchrun's
  default), where ``torch.distributed`` meets.

Choices where nothing says otherwise: the commands start together, one SSH session per node
(threads); each line of output reaches ``on_output`` prefixed ``[rank] ``, one line at a time
(never two nodes' text in one line); the results come back in rank order once every node is
done. A node whose command fails does not stop the others: its status is in its result.
"""

from __future__ import annotations

import asyncio
import shlex
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

from gpucloud_nb.client.run_output import RunResult
from gpucloud_nb.errors import InvalidInputError
from gpucloud_nb.models import InstanceDetails

__all__ = ["MASTER_PORT", "AsyncNodeRunner", "NodeRunner", "node_environment", "run_all",
           "run_all_async"]

#: Where rank 0 listens for the others unless told otherwise (torchrun's default).
MASTER_PORT = 29500


class NodeRunner(Protocol):
    """What :func:`run_all` needs of ``cloud.instances``."""

    def wait_until_active(self, id: str, timeout: float = ...) -> InstanceDetails: ...

    def run(self, id: str, command: str, *, timeout: float | None = None,
            on_output: Callable[[str], None] | None = None, wait: float = ...) -> RunResult: ...


class AsyncNodeRunner(Protocol):
    """What :func:`run_all_async` needs of ``acloud.instances``."""

    async def wait_until_active(self, id: str, timeout: float = ...) -> InstanceDetails: ...

    async def run(self, id: str, command: str, *, timeout: float | None = None,
                  on_output: Callable[[str], None] | None = None,
                  wait: float = ...) -> RunResult: ...


def node_environment(rank: int, ips: Sequence[str], master_port: int = MASTER_PORT) -> str:
    """The ``export`` line that tells node ``rank`` of ``ips`` where it stands.

        >>> print(node_environment(1, ["10.0.0.1", "10.0.0.2"]))
        export GPUCLOUD_NODE_RANK=1 GPUCLOUD_NUM_NODES=2 GPUCLOUD_NODE_IPS='10.0.0.1
        10.0.0.2' MASTER_ADDR=10.0.0.1 MASTER_PORT=29500
    """
    values = {
        "GPUCLOUD_NODE_RANK": str(rank),
        "GPUCLOUD_NUM_NODES": str(len(ips)),
        "GPUCLOUD_NODE_IPS": "\n".join(ips),
        "MASTER_ADDR": ips[0],
        "MASTER_PORT": str(master_port),
    }
    return "export " + " ".join(f"{name}={shlex.quote(value)}" for name, value in values.items())


def _checked_ids(ids: Sequence[str], command: str, master_port: int) -> list[str]:
    if isinstance(ids, str):
        raise InvalidInputError("ids must be a list of instance ids, not one string.")
    chosen = list(ids)
    if not chosen:
        raise InvalidInputError("run_all needs at least one instance id; none was given.")
    repeated = sorted({i for i in chosen if chosen.count(i) > 1})
    if repeated:
        raise InvalidInputError(f"Instance {repeated[0]} is given twice; each node runs the "
                                "command once.")
    if not isinstance(command, str) or not command.strip():
        raise InvalidInputError("run_all needs a command to run; an empty one was given.")
    if not isinstance(master_port, int) or not 0 < master_port < 65536:
        raise InvalidInputError(f"master_port must be a port number (1-65535), not "
                                f"{master_port!r}.")
    return chosen


def run_all(instances: NodeRunner, ids: Sequence[str], command: str, *,
            on_output: Callable[[str], None] | None = None, timeout: float | None = None,
            master_port: int = MASTER_PORT, wait: float = 60.0) -> list[RunResult]:
    """Run ``command`` on every instance of ``ids`` at once; the results in rank order.

    Each node's shell has the variables of the module docs set before ``command`` runs. The
    nodes are waited for (up to ``wait`` seconds) before any command starts, so rank 0's
    address is known to all.

        >>> [r.exit_status for r in run_all(cloud.instances, ids, "hostname")]  # doctest: +SKIP
        [0, 0, 0]
    """
    chosen = _checked_ids(ids, command, master_port)
    nodes = [instances.wait_until_active(i, timeout=wait) for i in chosen]
    ips = [node.ip for node in nodes]
    lock = threading.Lock()

    def one(rank: int) -> RunResult:
        def say(line: str) -> None:
            if on_output is not None:
                with lock:
                    on_output(f"[{rank}] {line}")

        script = f"{node_environment(rank, ips, master_port)}\n{command}"
        return instances.run(chosen[rank], script, timeout=timeout,
                             on_output=say if on_output is not None else None, wait=wait)

    with ThreadPoolExecutor(max_workers=len(chosen), thread_name_prefix="gpucloud-run-all") as pool:
        return list(pool.map(one, range(len(chosen))))


async def run_all_async(instances: AsyncNodeRunner, ids: Sequence[str], command: str, *,
                        on_output: Callable[[str], None] | None = None,
                        timeout: float | None = None, master_port: int = MASTER_PORT,
                        wait: float = 60.0) -> list[RunResult]:
    """The coroutine twin of :func:`run_all` (``on_output`` runs on the SSH loop)."""
    chosen = _checked_ids(ids, command, master_port)
    nodes = await asyncio.gather(*(instances.wait_until_active(i, timeout=wait) for i in chosen))
    ips = [node.ip for node in nodes]

    def prefixed(rank: int) -> Callable[[str], None] | None:
        if on_output is None:
            return None
        say = on_output
        return lambda line: say(f"[{rank}] {line}")

    return list(await asyncio.gather(*(
        instances.run(chosen[rank], f"{node_environment(rank, ips, master_port)}\n{command}",
                      timeout=timeout, on_output=prefixed(rank), wait=wait)
        for rank in range(len(chosen)))))
