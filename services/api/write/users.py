"""Users come into existence on their first authenticated request.

The insert is ``ON CONFLICT DO NOTHING`` (concurrent first requests are fine) and is done
once per user per process: ``KnownUsers`` remembers the ids it has ensured, bounded so a
long-lived process does not grow without limit.
"""
from __future__ import annotations

from collections import OrderedDict

from psycopg_pool import AsyncConnectionPool

# ~100 bytes per entry: 100k users cost ~10 MB and cover the active users of one process.
DEFAULT_CAPACITY = 100_000


class KnownUsers:
    """An LRU set of user ids known to exist in Postgres."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.capacity = capacity
        self._ids: OrderedDict[int, None] = OrderedDict()

    def __contains__(self, user_id: int) -> bool:
        return user_id in self._ids

    def touch(self, user_id: int) -> bool:
        """Whether the user is known to exist (and keep it, as recently used)."""
        if user_id not in self._ids:
            return False
        self._ids.move_to_end(user_id)
        return True

    def forget(self, user_id: int) -> None:
        """The user's row is gone (their account was deleted)."""
        self._ids.pop(user_id, None)

    def remember(self, user_id: int) -> None:
        self._ids[user_id] = None
        self._ids.move_to_end(user_id)
        while len(self._ids) > self.capacity:
            self._ids.popitem(last=False)

    async def ensure(self, pool: AsyncConnectionPool, user_id: int) -> None:
        """Create the user row unless this process already knows it exists. A deleted
        account's row is never created again: Postgres refuses it (migration 0006,
        ``psycopg.errors.InsufficientPrivilege``, answered 410 by the API)."""
        if self.touch(user_id):
            return
        async with pool.connection() as conn:
            await conn.execute("INSERT INTO users (user_id) VALUES (%s) ON CONFLICT DO NOTHING",
                               (user_id,))
        self.remember(user_id)
