"""Users changes: the read path's copy of a user's names (``user_profiles``).

Postgres ``users`` holds a user's handle and display name (PUT /v1/me/profile); the
API shows them next to every post of the user (feed items, post reads, timelines) from
this copy, never from Postgres per page. Each change writes the row at its LSN (``USING
TIMESTAMP``): replays and reordered deliveries converge on the newest change, and a
delete (its tombstone at the delete's LSN) beats a late update. A notice names the user
so every API process drops the names it holds (services/api/copies/names.py).

A user created without names (every first request creates one) writes nothing: no row
reads the same as a row of nulls, and most users never set a name.
"""
from __future__ import annotations

from typing import Any, Mapping

from services.shared.contracts.envelope import UNAVAILABLE_VALUE, ChangeRecord, MalformedEnvelope, require_int

from .copies import CopyStore


def _name(row: Mapping[str, Any], column: str) -> str | None:
    value = row.get(column)
    if value is not None and not isinstance(value, str):
        raise MalformedEnvelope(f"column {column} must be text or null, got {value!r}")
    return value


class ProfileChanges:
    def __init__(self, copies: CopyStore) -> None:
        self._copies = copies

    async def on_user_changed(self, change: ChangeRecord) -> None:
        row = change.row
        user_id = require_int(row, "user_id")
        if change.is_delete:
            await self._copies.delete_profile(user_id, change.lsn)
            return
        handle, display_name = _name(row, "handle"), _name(row, "display_name")
        if UNAVAILABLE_VALUE in (handle, display_name):
            # An unchanged TOASTed value (names are far too short to be; kept safe anyway):
            # the copy already holds it, from the change that set it.
            before = change.before or {}
            handle = _name(before, "handle") if handle == UNAVAILABLE_VALUE else handle
            display_name = (_name(before, "display_name") if display_name == UNAVAILABLE_VALUE
                            else display_name)
        if handle is None and display_name is None and change.before is None:
            return  # a new user without names: no row is the same as a row of nulls
        await self._copies.write_profile(user_id, handle, display_name, change.lsn)
