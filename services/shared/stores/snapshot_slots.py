"""Owner of the stored ranking snapshots: ``feed_snapshot_slots``.

Table (0010_snapshot_slots.cql): ``feed_snapshot_slots (slot, part) -> payload``, one
partition per batch of snapshots an API process coalesced, a row per snapshot (and per
copy stored again) at the part its index names (services/api/snapshots/snapshot_writer.py
writes it; services/api/snapshots/snapshot.py numbers the parts and finds a snapshot),
expiring by TTL, never deleted. Written and read by the API alone.
"""
from __future__ import annotations

from typing import NamedTuple

from .statements import Cql, Statements


class PayloadRow(NamedTuple):
    """``SnapshotSlotStatements.load``: one part of a slot."""

    payload: bytes | None


class SnapshotSlotStatements(Statements):
    """A slot's parts: written (with their TTL; a slot's together, in one batch), read
    by a range of parts: one snapshot's copies."""

    # (slot, part, payload, ttl_s)
    save = Cql("INSERT INTO feed_snapshot_slots (slot, part, payload) VALUES (?,?,?) USING TTL ?")
    # (slot, low part, high part) -> PayloadRow of low <= part < high
    load = Cql("SELECT payload FROM feed_snapshot_slots WHERE slot=? AND part>=? AND part<?")
