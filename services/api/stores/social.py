"""``follows``, ``blocks``, ``likes`` and ``mutes``.

Every write on one pair of users (follow, unfollow, block, unblock) first takes a
transaction-scoped advisory lock on the unordered pair, so a follow racing a block can
never leave a follow behind a block. It also gives hiding writes one lock order: the
pair, then the visibility fence (taken by the log triggers), then the rows. A block
holds the fence while it deletes the pair's follows; an unfollow that locked a follows
row before the pair would wait for the fence the other way round (a deadlock).
"""
from __future__ import annotations

from datetime import datetime
from typing import Awaitable, Callable

from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool


async def lock_pair(conn: AsyncConnection, a: int, b: int) -> None:
    low, high = min(a, b), max(a, b)
    await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                       (f"pair:{low}:{high}",))


async def user_exists(conn: AsyncConnection, user_id: int) -> bool:
    return await (await conn.execute("SELECT 1 FROM users WHERE user_id = %s",
                                     (user_id,))).fetchone() is not None


def pool_user_gone(pool: AsyncConnectionPool) -> Callable[[int], Awaitable[bool]]:
    """Whether a user has no ``users`` row (deleted, or never was), asked of ``pool``."""
    async def gone(user_id: int) -> bool:
        async with pool.connection() as conn:
            return not await user_exists(conn, user_id)
    return gone


async def blocked_either_way(conn: AsyncConnection, a: int, b: int) -> bool:
    return await (await conn.execute(
        "SELECT 1 FROM blocks WHERE (blocker_id = %s AND blocked_id = %s) "
        "OR (blocker_id = %s AND blocked_id = %s)", (a, b, b, a))).fetchone() is not None


async def follow(conn: AsyncConnection, follower_id: int, followed_id: int) -> datetime:
    """Start following (``following_since`` = now) or keep the existing start.

    The insert finds the follow there, and the read after it may not (an unfollow
    committed in between, each statement seeing the latest commits): then the follow is
    inserted again, now that nothing is in its way."""
    for _attempt in range(3):
        row = await (await conn.execute(
            "INSERT INTO follows (follower_id, followed_id, following_since) "
            "VALUES (%s, %s, now()) ON CONFLICT DO NOTHING RETURNING following_since",
            (follower_id, followed_id))).fetchone()
        if row is None:
            row = await (await conn.execute(
                "SELECT following_since FROM follows WHERE follower_id = %s AND followed_id = %s",
                (follower_id, followed_id))).fetchone()
        if row is not None:
            since: datetime = row[0]
            return since
    raise RuntimeError(f"follow {follower_id} -> {followed_id} kept being removed while it was written")


async def unfollow(conn: AsyncConnection, follower_id: int, followed_id: int) -> None:
    await lock_pair(conn, follower_id, followed_id)
    await conn.execute("DELETE FROM follows WHERE follower_id = %s AND followed_id = %s",
                       (follower_id, followed_id))


async def block(conn: AsyncConnection, blocker_id: int, blocked_id: int) -> None:
    """Record the block and end follows in both directions (same transaction)."""
    await conn.execute("INSERT INTO blocks (blocker_id, blocked_id) VALUES (%s, %s) "
                       "ON CONFLICT DO NOTHING", (blocker_id, blocked_id))
    await conn.execute("DELETE FROM follows WHERE (follower_id = %s AND followed_id = %s) "
                       "OR (follower_id = %s AND followed_id = %s)",
                       (blocker_id, blocked_id, blocked_id, blocker_id))


async def unblock(conn: AsyncConnection, blocker_id: int, blocked_id: int) -> None:
    await conn.execute("DELETE FROM blocks WHERE blocker_id = %s AND blocked_id = %s",
                       (blocker_id, blocked_id))


async def like(conn: AsyncConnection, post_id: int, user_id: int) -> None:
    await conn.execute("INSERT INTO likes (post_id, user_id) VALUES (%s, %s) "
                       "ON CONFLICT DO NOTHING", (post_id, user_id))


async def unlike(conn: AsyncConnection, post_id: int, user_id: int) -> None:
    await conn.execute("DELETE FROM likes WHERE post_id = %s AND user_id = %s",
                       (post_id, user_id))


async def mute(conn: AsyncConnection, muter_id: int, muted_id: int) -> None:
    """Record the mute (follows are left as they are; the muted user is not told)."""
    await conn.execute("INSERT INTO mutes (muter_id, muted_id) VALUES (%s, %s) "
                       "ON CONFLICT DO NOTHING", (muter_id, muted_id))


async def unmute(conn: AsyncConnection, muter_id: int, muted_id: int) -> None:
    await conn.execute("DELETE FROM mutes WHERE muter_id = %s AND muted_id = %s",
                       (muter_id, muted_id))
