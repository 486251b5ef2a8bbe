"""The per-user stream cap (services/api/stream/leases.py): one read on an open's path,
the lease written in the background, and a count that cannot be read admits the stream
on this process's own count instead of refusing it."""
from __future__ import annotations

import asyncio
from typing import Any

from services.api.stream.leases import StreamLeases


class _Session:
    def prepare(self, query: str) -> str:
        return query


class _Runner:
    """Stream leases in a dict; ``slow`` makes the count read hang."""

    def __init__(self) -> None:
        self.rows: dict[int, set[str]] = {}
        self.slow = False
        self.writes = 0

    async def run(self, statement: Any, params: tuple, hedge: bool = False) -> list[tuple]:
        user = params[0]
        if statement.startswith("SELECT"):
            if self.slow:
                await asyncio.sleep(10)
            return [(len(self.rows.get(user, ())),)]
        if statement.startswith("INSERT"):
            self.writes += 1
            self.rows.setdefault(user, set()).add(params[1])
        else:
            self.rows.get(user, set()).discard(params[1])
        return []


def _leases(runner: _Runner) -> StreamLeases:
    return StreamLeases(_Session(), runner, ttl_s=35, check_timeout_s=0.05)  # type: ignore[arg-type]


def test_the_cap_counts_every_process_s_leases() -> None:
    async def scenario() -> None:
        runner = _Runner()
        runner.rows[7] = {"elsewhere-1", "elsewhere-2"}   # two streams in other processes
        leases = _leases(runner)
        first = await leases.try_open(7, cap=3)
        assert first is not None
        await asyncio.sleep(0)                            # the background write lands
        assert runner.writes == 1 and first in runner.rows[7]
        assert await leases.try_open(7, cap=3) is None    # three held: refused
        await leases.close(7, first)
        assert await leases.try_open(7, cap=3) is not None

    asyncio.run(scenario())


def test_an_unreadable_count_admits_on_this_process_s_own_count() -> None:
    async def scenario() -> None:
        runner = _Runner()
        runner.slow = True
        leases = _leases(runner)
        opened = [await leases.try_open(7, cap=2) for _ in range(3)]
        assert opened[0] is not None and opened[1] is not None
        assert opened[2] is None        # this process alone holds the cap
        assert leases.unchecked == 2

    asyncio.run(scenario())
