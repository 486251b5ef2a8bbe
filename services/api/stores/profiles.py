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


async def fetch(conn: AsyncConnection, user_id: int) -> UserRow | None:
    row = await (await conn.execute(
        "SELECT user_id, handle, display_name, created_at FROM users WHERE user_id = %s",
        (user_id,))).fetchone()
    return UserRow(*row) if row is not None else None
