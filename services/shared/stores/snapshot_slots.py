"""Owner of the stored ranking snapshots: ``feed_snapshot_slots``.

Table (0010_snapshot_slots.cql): ``feed_snapshot_slots (slot, part) -> payload``, one row
per batch of snapshots an API process coalesced (services/api/snapshots/snapshot_writer.py
packs it; services/api/snapshots/snapshot.py finds a snapshot in it), expiring by TTL,
never deleted. Written and read by the API alone.
"""
from __future__ import annotations

from typing import NamedTuple

from .statements import Cql, Statements


class PayloadRow(NamedTuple):
    """``SnapshotSlotStatements.load``: one part of a slot."""

    payload: bytes | None


class SnapshotSlotStatements(Statements):
    """A slot's parts: written (with their TTL), read all at once."""

    # (slot, part, payload, ttl_s)
    save = Cql("INSERT INTO feed_snapshot_slots (slot, part, payload) VALUES (?,?,?) USING TTL ?")
    # slot -> PayloadRow
    load = Cql("SELECT payload FROM feed_snapshot_slots WHERE slot=?")
