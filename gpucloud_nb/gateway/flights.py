"""Lists that arrive together share one request to the upstream, each as fresh as a direct call.

    >>> flights = Flights()
    >>> async def fly():  # one request to the upstream: (status, body, Retry-After)
    ...     return 200, b"[]", None
    >>> asyncio.run(flights.board(("/gpu-cloud/instances", ""), fly))
    (200, b'[]', None)

A class gateway lists the whole upstream account for each student's list (it keeps the student's
own items of the answer). When a class refreshes at once (the teacher says "run the next cell"),
40 lists of the whole account reach the upstream together, all under the gateway's one key,
which a real cloud may rate-limit (the spec's 429); on loopback, 40 at once had a p99 of 132 ms
through the gateway against 62 ms direct (``benchmarks/bench_gateway.py``, burst row). So lists
of the same query **board** one flight, by one rule:

- **A flight leaves one turn of the event loop after its first list opened it**, and every list
  of the same query the gateway took in meanwhile boards it. It leaves after each of them
  arrived, so each answer shows the upstream at a moment after its own ask: as fresh as a direct
  call. The gateway keeps no answer once given; nothing is served from a store of lists.
- **A list never waits for a flight in the air.** One that arrives after a flight left opens the
  next, which leaves one turn later whatever the first is doing. Lists that come one at a time
  (sidebars polling at their own moments) each fly alone, a turn later than they would have:
  microseconds, where waiting for a flight in the air would cost up to a whole list
  (the ``coalesce`` branch tried that rule: paced lists 63-76 ms became 83-97 ms with an upstream
  50 ms away).
- What the flight met reaches every list that boarded it, each answered as it would have been
  alone: the upstream's status and bytes (each list keeps its own person's items), an upstream
  that did not answer (:class:`~gpucloud_nb.gateway.upstream.UpstreamUnreachable`, each its own
  502), and the answer's ``Retry-After`` (each list sets it in its own
  :data:`~gpucloud_nb.gateway.upstream.RETRY_AFTER`).
- A flight runs in a task of its own, in an empty context: a list whose client went away leaves
  it flying for the others, and the flight's time is nobody's; each list adds the time it
  waited to its own ``Server-Timing`` upstream figure
  (:data:`~gpucloud_nb.gateway.timing.UPSTREAM_SPENT`).
- Only lists board (a student's ``GET /gpu-cloud/instances`` and the meter's): a get, a create
  or a delete asks about one thing and goes alone.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import Awaitable, Callable, Hashable

from gpucloud_nb.gateway.timing import UPSTREAM_SPENT

__all__ = ["Answer", "Flights"]

Answer = tuple[int, bytes, str | None]
"""What a flight brings back: the upstream's status, its body and its ``Retry-After``."""


def _retrieved(future: asyncio.Future[Answer]) -> None:
    """Mark an error as seen, so a flight whose every list went away logs no unretrieved one."""
    if not future.cancelled():
        future.exception()


class Flights:
    """The boarding flights of one upstream, by query (see the module)."""

    def __init__(self) -> None:
        self._boarding: dict[Hashable, asyncio.Future[Answer]] = {}
        self._flying: set[asyncio.Task[None]] = set()  # kept until landed: tasks are weak
        #: how many requests flew to the upstream, and how many lists they answered
        self.flown = 0
        self.asked = 0

    async def board(self, key: Hashable, fly: Callable[[], Awaitable[Answer]]) -> Answer:
        """The answer of the flight of ``key`` boarding now (``fly()`` is called once per
        flight, in a context of its own); raises what the flight raised."""
        self.asked += 1
        landing = self._boarding.get(key)
        if landing is None:
            landing = self._boarding[key] = asyncio.get_running_loop().create_future()
            landing.add_done_callback(_retrieved)
            task = contextvars.Context().run(asyncio.create_task,
                                             self._fly(key, landing, fly))
            self._flying.add(task)
            task.add_done_callback(self._flying.discard)
        spent, start = UPSTREAM_SPENT.get(), time.perf_counter()
        try:
            return await asyncio.shield(landing)  # a list going away leaves the flight
        finally:
            if spent is not None:
                spent[0] += time.perf_counter() - start

    async def _fly(self, key: Hashable, landing: asyncio.Future[Answer],
                   fly: Callable[[], Awaitable[Answer]]) -> None:
        try:
            try:
                # One turn more: this task's first step ran after the lists the loop had taken
                # in with the first; this one lets those read in the same pass through board too.
                await asyncio.sleep(0)
            finally:
                if self._boarding.get(key) is landing:
                    del self._boarding[key]  # boarding closed: later lists open the next flight
            self.flown += 1
            answer = await fly()
        except asyncio.CancelledError:  # the gateway stops: whoever boarded is cancelled too
            landing.cancel()
            raise
        except Exception as error:  # each list raises it (UpstreamUnreachable: a 502)
            landing.set_exception(error)
        else:
            landing.set_result(answer)

    async def aclose(self) -> None:
        """Cancel the flights in the air (the gateway stops)."""
        for task in list(self._flying):
            task.cancel()
        await asyncio.gather(*self._flying, return_exceptions=True)
