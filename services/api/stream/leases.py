"""Per-user cap on open streams, shared by every API process (Cassandra ``stream_leases``).

A stream takes a lease row (TTL ``ttl_s``) when it opens, refreshes it on every
heartbeat and deletes it when it closes; a process that dies leaves rows that expire.
The count-then-insert is not atomic: two streams opened at the same instant can both
pass, so the cap can be exceeded by the number of simultaneous opens. That is a soft
cap by design (an LWT per connection would cost a Paxos round for a resource guard).
"""
from __future__ import annotations

import secrets
from datetime import datetime, timezone

from cassandra.cluster import Session

from ..feed.store import StatementRunner


class StreamLeases:
    def __init__(self, session: Session, store: StatementRunner, ttl_s: int) -> None:
        self._store = store
        self._ttl_s = ttl_s
        p = session.prepare
        self._count = p("SELECT COUNT(*) FROM stream_leases WHERE user_id=?")
        self._put = p("INSERT INTO stream_leases (user_id, stream_id, opened_at) VALUES (?,?,?) "
                      "USING TTL ?")
        self._drop = p("DELETE FROM stream_leases WHERE user_id=? AND stream_id=?")

    async def try_open(self, user_id: int, cap: int) -> str | None:
        """A new lease id, or None when the user already holds ``cap`` streams."""
        rows = await self._store.run(self._count, (user_id,), hedge=True)
        if rows and int(rows[0][0]) >= cap:
            return None
        lease = secrets.token_hex(8)
        await self.refresh(user_id, lease)
        return lease

    async def refresh(self, user_id: int, lease: str) -> None:
        # Safe to send twice (the same cells; FeedStore hedges a slow one to another node).
        await self._store.run(self._put, (user_id, lease, datetime.now(timezone.utc), self._ttl_s),
                              hedge=True)

    async def close(self, user_id: int, lease: str) -> None:
        await self._store.run(self._drop, (user_id, lease), hedge=True)
