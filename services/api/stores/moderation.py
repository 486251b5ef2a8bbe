"""``posts.visibility`` and ``moderation_actions``, always changed together."""
from __future__ import annotations

from datetime import datetime

from psycopg import AsyncConnection


async def apply(conn: AsyncConnection, post_id: int, *, visibility: int, state: str,
                reason: str, moderator_id: int) -> datetime | None:
    """Set the post's visibility and record the action; None if there is no such post."""
    row = await (await conn.execute("SELECT visibility FROM posts WHERE post_id = %s FOR UPDATE",
                                    (post_id,))).fetchone()
    if row is None:
        return None
    if row[0] != visibility:
        await conn.execute("UPDATE posts SET visibility = %s WHERE post_id = %s",
                           (visibility, post_id))
    stamped = await (await conn.execute(
        "INSERT INTO moderation_actions (post_id, state, reason, moderator_id, updated_at) "
        "VALUES (%s, %s, %s, %s, now()) ON CONFLICT (post_id) DO UPDATE SET "
        "state = EXCLUDED.state, reason = EXCLUDED.reason, "
        "moderator_id = EXCLUDED.moderator_id, updated_at = EXCLUDED.updated_at "
        "RETURNING updated_at", (post_id, state, reason, moderator_id))).fetchone()
    assert stamped is not None  # an upsert's RETURNING always has its row
    updated_at: datetime = stamped[0]
    return updated_at
