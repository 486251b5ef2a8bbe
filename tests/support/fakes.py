"""Small fakes the unit tests share (stores have theirs in memory_stores.py)."""
from __future__ import annotations

import asyncio


class RecordingPublisher:
    """An ``EventPublisher`` stand-in: records every send, each acknowledged at once."""

    def __init__(self) -> None:
        self.sent: list[tuple] = []

    async def send(self, topic, key, value, headers=()):
        self.sent.append((topic, key, value, dict(headers)))
        fut = asyncio.get_running_loop().create_future()
        fut.set_result(None)
        return fut

    async def send_keyed(self, topic, records):
        """``EventPublisher.send_keyed``: every record recorded as ``send`` would."""
        return [await self.send(topic, key, value) for key, value in records]


class TransientError(Exception):
    """A store error the code under test is told to retry."""
