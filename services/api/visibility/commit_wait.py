"""Commit wait: a write that hides something is answered a fixed time after it commits.

A stream event is judged on a log read and written a moment later; answering hiding writes
``wait_s`` late and writing events within ``stream_bound(wait_s)`` of their read puts every
event before any answer its read missed (docs/read-path.md, "Streams: commit wait").
"""
from __future__ import annotations

import asyncio

# Time allowed between an event's last check and its bytes reaching the socket; enforced
# where they are written (stream/write_deadline.py: past it, resync instead).
WRITE_MARGIN_S = 0.05


def stream_bound(wait_s: float) -> float | None:
    """How old an event's last log read may be when it is written; None when commit
    wait is off (``wait_s`` ≤ the margin), and the stream only orders by its reads."""
    return wait_s - WRITE_MARGIN_S if wait_s > WRITE_MARGIN_S else None


async def settle(wait_s: float) -> None:
    """Await ``wait_s`` after a hiding write's commit, before its answer."""
    if wait_s > 0:
        await asyncio.sleep(wait_s)
