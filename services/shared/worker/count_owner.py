"""``CountOwner``: the agent side of counts with one writer (domain/owned_counts.py).

An agent over a count topic (``<prefix>.follow-counts``, ``<prefix>.like-counts``) hands
each message to ``take``, which only parses it and keeps it with its offset under its
counted id (a malformed record goes to the DLQ like any other); its batch's
``finish_batch`` is ``apply``, which writes each count's changes of the whole batch with
``CountedEdges.apply``, counts concurrently and each count by itself. So a post liked
300 times in a batch costs 5 reads and 5 plain batches, and the batch is acked only after
(consume_in_batches). A transient store error retries ``apply`` whole: a count already
written reads its edges back and writes nothing.
"""
from __future__ import annotations

import asyncio
from typing import Callable

from services.shared.contracts import edge_counts
from services.shared.stores.counted_edges import CountedEdges, OwnedChange

from .faust_app import RawMessage


class CountOwner:
    """One per agent: the changes taken belong to that agent's current batch."""

    def __init__(self, edges: CountedEdges, counts_in_flight: int,
                 applied: Callable[[int], None] = lambda counted: None) -> None:
        self._edges = edges
        self._in_flight = max(1, counts_in_flight)
        self._applied = applied  # told of every count written (the ranker rescores it)
        self._pending: dict[int, list[OwnedChange]] = {}

    async def take(self, msg: RawMessage) -> None:
        record = edge_counts.parse(msg.value)
        if record is not None:
            self._pending.setdefault(record.counted, []).append(OwnedChange(record.change, msg.offset))

    async def apply(self) -> None:
        """Write every count taken since the last call (a count's changes in offset order)."""
        waiting = list(self._pending)

        async def worker() -> None:
            while waiting:
                counted = waiting.pop()
                changes = sorted(self._pending[counted], key=lambda c: c.offset)
                await self._edges.apply(counted, changes)
                del self._pending[counted]
                self._applied(counted)

        tasks = [asyncio.ensure_future(worker()) for _ in range(min(self._in_flight, len(waiting)))]
        if not tasks:
            return
        done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        for task in pending:  # one failed: the others stop before the retry starts over
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        for task in done:
            if task.exception() is not None:
                raise task.exception()  # type: ignore[misc]
