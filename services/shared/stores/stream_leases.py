"""Owner of the stream leases: ``stream_leases``.

Table (0003_stream_leases.cql): ``stream_leases (user_id, stream_id) -> opened_at``, one
row per open stream of a user, refreshed by the stream's heartbeat, expiring by TTL
(services/api/stream/leases.py: the per-user cap every API process counts).
"""
from __future__ import annotations

from typing import NamedTuple

from .statements import Cql, Statements


class CountRow(NamedTuple):
    """``LeaseStatements.count``: how many streams the user holds open."""

    streams: int   # COUNT(*)


class LeaseStatements(Statements):
    """A user's leases: counted, written (with their TTL) and dropped."""

    count = Cql("SELECT COUNT(*) FROM stream_leases WHERE user_id=?")
    # (user_id, stream_id, opened_at, ttl_s)
    put = Cql("INSERT INTO stream_leases (user_id, stream_id, opened_at) VALUES (?,?,?) "
              "USING TTL ?")
    # (user_id, stream_id)
    drop = Cql("DELETE FROM stream_leases WHERE user_id=? AND stream_id=?")
