"""``account_states`` (migration 0006): deletion and suspension of an account, in
Postgres, each in one transaction with what it implies."""
from __future__ import annotations

from psycopg import AsyncConnection

SUSPENDED, DELETED = "suspended", "deleted"


async def delete_account(conn: AsyncConnection, user_id: int) -> bool:
    """Mark the account deleted, remove its follows, blocks, mutes and likes, and delete
    its users row (its posts stay, hidden). False when it was deleted already. Call
    inside a transaction: the account_states row is written first, so the removals log
    no fence entry of their own (0006's triggers) and the one 'account' entry hides it."""
    row = await (await conn.execute(
        "SELECT state FROM account_states WHERE user_id = %s FOR UPDATE", (user_id,))).fetchone()
    if row is not None and row[0] == DELETED:
        return False
    if row is None:
        await conn.execute("INSERT INTO account_states (user_id, state) VALUES (%s, 'deleted')",
                           (user_id,))
    else:  # suspended: stays hidden, now for good (no fence entry: hidden-ness unchanged)
        await conn.execute("UPDATE account_states SET state = 'deleted', reason = '', "
                           "moderator_id = NULL, changed_at = now() WHERE user_id = %s", (user_id,))
    for sql in ("DELETE FROM follows WHERE follower_id = %(u)s OR followed_id = %(u)s",
                "DELETE FROM blocks WHERE blocker_id = %(u)s OR blocked_id = %(u)s",
                "DELETE FROM mutes WHERE muter_id = %(u)s OR muted_id = %(u)s",
                "DELETE FROM likes WHERE user_id = %(u)s",
                "DELETE FROM users WHERE user_id = %(u)s"):
        await conn.execute(sql, {"u": user_id})
    return True


async def suspend(conn: AsyncConnection, user_id: int, *, reason: str, moderator_id: int) -> str | None:
    """Suspend the account (a repeat updates the reason). The state after: 'suspended',
    'deleted' (a deleted account stays deleted), or None when there is no such user."""
    row = await (await conn.execute(
        "SELECT u.user_id IS NOT NULL, a.state FROM (SELECT %(u)s::bigint AS id) k"
        " LEFT JOIN users u ON u.user_id = k.id LEFT JOIN account_states a ON a.user_id = k.id",
        {"u": user_id})).fetchone()
    assert row is not None
    exists, state = row
    if state == DELETED:
        return DELETED
    if not exists:
        return None
    await conn.execute(
        "INSERT INTO account_states (user_id, state, reason, moderator_id) VALUES (%s, 'suspended', %s, %s)"
        " ON CONFLICT (user_id) DO UPDATE SET reason = EXCLUDED.reason,"
        " moderator_id = EXCLUDED.moderator_id, changed_at = now()"
        " WHERE account_states.state = 'suspended'", (user_id, reason, moderator_id))
    return SUSPENDED


async def unsuspend(conn: AsyncConnection, user_id: int) -> str | None:
    """Lift a suspension (the row goes: an 'account' entry with hidden false). The state
    after: None (active, or no such user) or 'deleted' (final: nothing changes)."""
    row = await (await conn.execute(
        "DELETE FROM account_states WHERE user_id = %s AND state = 'suspended' RETURNING user_id",
        (user_id,))).fetchone()
    if row is not None:
        return None
    gone = await (await conn.execute("SELECT state FROM account_states WHERE user_id = %s",
                                     (user_id,))).fetchone()
    return DELETED if gone is not None else None
