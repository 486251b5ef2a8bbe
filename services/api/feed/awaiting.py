"""Awaiting several reads: concurrently when they go to Cassandra, in turn when they do not.

``asyncio.gather`` wraps every awaitable in a task: worth it when each waits on the
network, pure overhead when each is answered from the serving cache (task creation and
the gather's bookkeeping were ~10 % of a warm page's CPU, py-spy on the read grid). The
store says which case holds (``from_memory``); a miss in turn costs one more round trip.
"""
from __future__ import annotations

import asyncio
from typing import Awaitable, Sequence, TypeVar

T = TypeVar("T")


async def settled(reads: Sequence[Awaitable[T]], in_turn: bool) -> list[T | BaseException]:
    """Every result or exception, in order (``gather(..., return_exceptions=True)``)."""
    if not in_turn and len(reads) > 1:
        return await asyncio.gather(*reads, return_exceptions=True)
    out: list[T | BaseException] = []
    for read in reads:
        try:
            out.append(await read)
        except Exception as exc:  # noqa: BLE001 - returned, like gather's return_exceptions
            out.append(exc)
    return out
