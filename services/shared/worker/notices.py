"""``Notices``: a worker (or the API) tells every API process which serving copies it changed.

What a notice says, and its encoding, is the contract in
services/shared/contracts/serving_changes.py; this is the sending side.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from services.shared.contracts.serving_changes import ServingChange, encode, split
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
