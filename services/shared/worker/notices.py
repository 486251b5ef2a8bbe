"""``Notices``: a worker (or the API) tells every API process which serving copies it changed.

What a notice says, and its encoding, is the contract in
services/shared/contracts/serving_changes.py; this is the sending side.

Inside a worker's batch (``batched_notices``, opened by batch_consumer.py) the changes
are merged and sent together when the batch is applied, before its acks wait for them:
a batch of 1,000 posts names each post, timeline and inbox once, in a few records,
instead of three or four records per post, each read by every API process. A handler
about to publish what readers act on at once (the fan-out's ``author-events``) sends
what is pending first (``flush_notices``), so the notices still go out before it. A
cached copy may therefore be served until its batch is applied: at most the batch's
duration longer than before (milliseconds at low load; under a backlog, the batch
time, which the readers' freshness figures include).
"""
from __future__ import annotations

import asyncio
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Iterator

from services.shared.contracts.serving_changes import ServingChange, encode, merge, split
from services.shared.worker.event_publisher import delivered


@dataclass
class Notices:
    """Publishes notices through an ``EventPublisher``-like sender and waits for the
    broker's acknowledgement: when ``changed`` returns, every API process will see it.
    In a worker's batch the wait is the batch's (``event_publisher.delivered``): its
    offsets are committed only after every notice it sent is acknowledged."""

    publisher: object  # an EventPublisher, or a test's sender with the same send()
    topic: str
    sent: int = field(default=0)
    # partition -> offset after the last notice acknowledged: a test waits until an API
    # process has applied this far (``ServingCache.applied``) before its next request.
    delivered: dict[int, int] = field(default_factory=dict)

    async def changed(self, change: ServingChange) -> None:
        if not change:
            return
        pending = _PENDING.get()
        if pending is not None:
            pending.setdefault(id(self), (self, []))[1].append(change)
            return
        await self._send(change)

    async def _send(self, change: ServingChange) -> None:
        futures = [await self.publisher.send(self.topic, *encode(part))  # type: ignore[attr-defined]
                   for part in split(change)]
        for fut in futures:
            fut.add_done_callback(self._acknowledged)
        self.sent += len(futures)
        # Awaited here, or by the worker's batch before it acks (event_publisher.py).
        await delivered(futures)

    def _acknowledged(self, fut: "asyncio.Future[Any]") -> None:
        if fut.cancelled() or fut.exception() is not None:
            return
        meta = fut.result()
        if meta is not None and hasattr(meta, "partition"):
            self.delivered[meta.partition] = max(self.delivered.get(meta.partition, 0),
                                                 meta.offset + 1)


# id(Notices) -> (it, its changes not sent yet), while a batch is applied (shared by the
# batch's tasks).
_PENDING: ContextVar[dict[int, tuple[Notices, list[ServingChange]]] | None] = ContextVar(
    "feed_batched_notices", default=None)


@contextmanager
def batched_notices() -> Iterator[None]:
    """Within this block (and the tasks it starts), ``Notices.changed`` merges instead of
    sending; ``flush_notices`` sends. Whatever is still pending when the block ends was
    never sent: call ``flush_notices`` before leaving it (batch_consumer.py does)."""
    token = _PENDING.set({})
    try:
        yield
    finally:
        _PENDING.reset(token)


async def flush_notices() -> None:
    """Send the notices merged so far in this batch (nothing outside one)."""
    pending = _PENDING.get()
    if not pending:
        return
    for key in list(pending):
        notices, changes = pending.pop(key)  # what handlers add from here on starts anew
        try:
            await notices._send(merge(changes))
        except BaseException:
            # Kept for the retry (sending a part twice is harmless: notices are idempotent).
            pending.setdefault(key, (notices, []))[1].extend(changes)
            raise
