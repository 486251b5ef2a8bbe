"""A user's profile: ``users.handle`` and ``users.display_name`` (0007_profiles.sql)."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from psycopg import AsyncConnection, errors

# Postgres' name for the unique index on lower(handle).
HANDLE_INDEX = "users_handle_lower"


class HandleTaken(Exception):
    """Another user holds the handle (whatever its case)."""


@dataclass(frozen=True)
class UserRow:
    user_id: int
    handle: str | None
    display_name: str | None
    created_at: datetime
    following: bool = False   # the viewer follows the user
    muted: bool = False       # the viewer mutes the user


async def save(conn: AsyncConnection, user_id: int, handle: str | None,
               display_name: str | None) -> None:
    """Set the user's names (None clears one). A profile already so is not written again:
    a repeated PUT changes nothing and sends no change down the pipeline. Raises
    ``HandleTaken``."""
    try:
        await conn.execute(
            "UPDATE users SET handle = %s, display_name = %s WHERE user_id = %s "
            "AND (handle IS DISTINCT FROM %s OR display_name IS DISTINCT FROM %s)",
            (handle, display_name, user_id, handle, display_name))
    except errors.UniqueViolation as exc:
        if exc.diag.constraint_name == HANDLE_INDEX:
            raise HandleTaken(handle) from exc
        raise


async def names_of(conn: AsyncConnection, user_id: int) -> tuple[str | None, str | None]:
    """The user's (handle, display name); (None, None) when unset or there is no row."""
    row = await (await conn.execute("SELECT handle, display_name FROM users WHERE user_id = %s",
                                    (user_id,))).fetchone()
    return (row[0], row[1]) if row is not None else (None, None)


async def fetch(conn: AsyncConnection, user_id: int, viewer_id: int) -> UserRow | None:
    """The user's row and, in the same statement, whether ``viewer_id`` follows and mutes
    them (``follows`` and ``mutes``, the truth: a follow, unfollow, mute or unmute
    answered 2xx shows on the next read). Two primary-key probes besides the row."""
    row = await (await conn.execute(
        "SELECT u.user_id, u.handle, u.display_name, u.created_at, "
        "EXISTS (SELECT 1 FROM follows WHERE follower_id = %s AND followed_id = u.user_id), "
        "EXISTS (SELECT 1 FROM mutes WHERE muter_id = %s AND muted_id = u.user_id) "
        "FROM users u WHERE u.user_id = %s",
        (viewer_id, viewer_id, user_id))).fetchone()
    return UserRow(*row) if row is not None else None
