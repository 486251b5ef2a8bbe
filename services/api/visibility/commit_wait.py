"""Commit wait: a write that hides something is answered a fixed time after it commits.

The visibility fence (``services/api/visibility/fence.py``) gives each page a read of the log
that goes out after the page arrived, so a page that starts after an acknowledgement
sees it. A stream event has no such start: it is judged on a read of the log and written
to the wire a moment later, and a delete, removal, block or unfollow that committed in
between (after the read's snapshot) could be acknowledged by another API process before
the event is written: the reader would get the item after the acknowledgement.

Commit wait closes that window, as Spanner's commit wait does for its timestamps:

- a hiding write is answered no sooner than ``wait_s`` after its commit returned;
- a stream event is judged only on a log read that went out less than
  ``stream_bound(wait_s)`` ago (``services/api/stream/gate.py``), and written at most
  ``WRITE_MARGIN_S`` after that check, or not at all (``services/api/stream/write_deadline.py``
  holds it where the bytes are written, after any wait for the socket: later, the
  stream gets ``resync`` instead).

A write the read missed committed after the read went out, so its answer leaves after
``read sent + wait_s``, later than the event's write (``read sent + wait_s - margin``).
Only real-time order and durations on each process's own monotonic clock are used, no
clock shared between hosts. The price is ``wait_s`` of latency on deletes, removals,
blocks and unfollows (no database connection is held while it passes) and a re-read of
the log for an event whose last read is older than the bound.
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
