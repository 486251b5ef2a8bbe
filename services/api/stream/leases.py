"""Per-user cap on open streams, shared by every API process (Cassandra ``stream_leases``,
its statements from their owner: services/shared/stores/stream_leases.py).

A stream takes a lease row (TTL ``ttl_s``) when it opens, refreshes it on every
heartbeat and deletes it when it closes; a process that dies leaves rows that expire.
The count-then-insert is not atomic: two streams opened at the same instant can both
pass, so the cap can be exceeded by the number of simultaneous opens. That is a soft
cap by design (an LWT per connection would cost a Paxos round for a resource guard).

An open costs one read on its path, no write: the lease row is written in the
background (the first heartbeat writes it again). The cap guards a resource, it decides
nothing a reader is owed, so when the shared count cannot be read within
``check_timeout_s`` (1,000 readers opening at once, a node down) the stream is admitted
on this process's own count of the user's streams, which holds the cap per process, and
``unchecked`` counts it. Refusing instead turned a burst of opens into 503s and retries
(318 of 1,000 opens refused in a run on 2026-12-04).
"""
from __future__ import annotations

import asyncio
import logging
import secrets
from datetime import datetime, timezone
from typing import Any, Callable, Coroutine

from cassandra.cluster import Session

from services.shared.stores.stream_leases import CountRow, LeaseStatements

from ..copies.store import StatementRunner

log = logging.getLogger(__name__)


class StreamLeases:
    def __init__(self, session: Session, store: StatementRunner, ttl_s: int,
                 check_timeout_s: float = 0.5,
                 on_unchecked: Callable[[], None] = lambda: None) -> None:
        self._store = store
        self._ttl_s = ttl_s
        self._check_timeout_s = check_timeout_s
        self._leases = LeaseStatements(session)
        self._here: dict[int, int] = {}     # user -> streams open in this process
        self._writes: set[asyncio.Future[None]] = set()
        self.unchecked = 0                  # admitted without the shared count
        self._on_unchecked = on_unchecked

    async def try_open(self, user_id: int, cap: int) -> str | None:
        """A new lease id, or None when the user already holds ``cap`` streams."""
        here = self._here.get(user_id, 0)
        if here >= cap:
            return None
        try:
            rows = await asyncio.wait_for(self._store.run(self._leases.count, (user_id,), hedge=True),
                                          self._check_timeout_s)
        except Exception:  # noqa: BLE001 - a soft cap: this process's count holds it
            self.unchecked += 1
            self._on_unchecked()
            log.warning("stream cap of user %d not read; admitted on this process's count",
                        user_id, exc_info=True)
            rows = None
        if rows and CountRow._make(rows[0]).streams >= cap:
            return None
        lease = secrets.token_hex(8)
        self._here[user_id] = here + 1
        self._background(self.refresh(user_id, lease))
        return lease

    async def refresh(self, user_id: int, lease: str) -> None:
        # Safe to send twice (the same cells; FeedStore hedges a slow one to another node).
        await self._store.run(self._leases.put, (user_id, lease, datetime.now(timezone.utc), self._ttl_s),
                              hedge=True)

    def release(self, user_id: int, lease: str) -> None:
        """``close`` in the background: a stream ends in a cancelled response scope, and
        the task is kept referenced until done."""
        self._background(self.close(user_id, lease))

    async def close(self, user_id: int, lease: str) -> None:
        here = self._here.get(user_id, 0) - 1
        if here > 0:
            self._here[user_id] = here
        else:
            self._here.pop(user_id, None)
        await self._store.run(self._leases.drop, (user_id, lease), hedge=True)

    def _background(self, write: Coroutine[Any, Any, None]) -> None:
        async def logged() -> None:
            try:
                await write
            except Exception:  # noqa: BLE001 - a lost write: the heartbeat or the TTL mends it
                log.warning("stream lease not written or dropped; the next heartbeat or its "
                            "TTL mends it", exc_info=True)
        task = asyncio.ensure_future(logged())
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)
