"""Owner of the readers' feed preferences: ``reader_preferences``.

Table (0007_reader_preferences.cql): ``reader_preferences (reader_id) -> feed_order,
updated_at``, written and read by the API alone (GET|PUT /v1/me/preferences, and the
feed's default order).
"""
from __future__ import annotations

from typing import NamedTuple

from .statements import Cql, Statements


class FeedOrderRow(NamedTuple):
    """``PreferenceStatements.feed_order``."""

    feed_order: str | None


class PreferenceStatements(Statements):
    """A reader's stored feed order: read, and written (stamped by the node's clock)."""

    feed_order = Cql("SELECT feed_order FROM reader_preferences WHERE reader_id=?")
    # (reader_id, feed_order)
    save_feed_order = Cql("INSERT INTO reader_preferences (reader_id, feed_order, "
                          "updated_at) VALUES (?,?,toTimestamp(now()))")
