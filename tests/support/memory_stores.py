"""In-memory stores for unit tests, held to the real ones by contract suites.

``InMemoryActivityStore`` implements ``services.common.activity.ActivityPort`` the way
``ActivityStore`` does on Cassandra; tests/integration/test_activity_store_contract.py
runs one suite against both, so a unit test's store cannot drift from the real one.
TTLs are not modelled (nothing in the contract depends on expiry).
"""
from __future__ import annotations

import time
from collections import defaultdict
from typing import AsyncIterator, Sequence

from services.common.activity import ACTIVE, SWEEP_NAME, Activity


class InMemoryActivityStore:
    def __init__(self) -> None:
        self.last: dict[int, int] = {}
        self.state: dict[int, str] = {}
        self.state_at: dict[int, int] = {}
        self.index: dict[int, set[int]] = defaultdict(set)
        self.follows: dict[int, list[int]] = defaultdict(list)
        self.flags: set[tuple[int, int]] = set()  # (author, reader)
        self.progress: dict[str, int] = {}

    def follow(self, reader_id: int, author_id: int) -> None:
        """Seed a follow (the real store reads the ``following`` copy the fan-out wrote)."""
        if author_id not in self.follows[reader_id]:
            self.follows[reader_id].append(author_id)

    async def record_read(self, reader_id: int, period: int, ttl_s: int) -> None:
        self.last[reader_id] = period
        self.index[period].add(reader_id)

    async def record_reads(self, reads: Sequence[tuple[int, int]], ttl_s: int,
                           in_flight: int = 64) -> None:
        for reader_id, period in reads:
            await self.record_read(reader_id, period, ttl_s)

    async def activity(self, reader_id: int) -> Activity:
        if reader_id not in self.last and reader_id not in self.state:
            return Activity(None, ACTIVE, None)
        return Activity(self.last.get(reader_id), self.state.get(reader_id, ACTIVE),
                        self.state_at.get(reader_id))

    async def set_state(self, reader_id: int, state: str) -> None:
        self.state[reader_id] = state
        self.state_at[reader_id] = int(time.time() * 1000)

    async def following(self, reader_id: int) -> list[int]:
        return sorted(self.follows.get(reader_id, []))

    async def flag(self, reader_id: int, authors: Sequence[int]) -> None:
        self.flags |= {(a, reader_id) for a in authors}

    async def unflag(self, reader_id: int, authors: Sequence[int]) -> None:
        self.flags -= {(a, reader_id) for a in authors}

    async def inactive_followers(self, author_id: int) -> frozenset[int]:
        return frozenset(r for a, r in self.flags if a == author_id)

    async def readers_in(self, period: int) -> AsyncIterator[list[int]]:
        readers = sorted(self.index.get(period, ()))
        if readers:
            yield readers

    async def swept_through(self, name: str = SWEEP_NAME) -> int | None:
        return self.progress.get(name)

    async def save_progress(self, period: int, name: str = SWEEP_NAME) -> None:
        self.progress[name] = period
