"""The relay's replication slot and its durable snapshot state (table cdc_relay_state).

The slot is the relay's lock as well as its position: Postgres lets one connection use a
slot at a time, so a second relay on the same slot is refused (``SlotInUse``).
"""
from __future__ import annotations

from dataclasses import dataclass

import psycopg

from services.shared.settings import CdcProcess

from .pgoutput import lsn_from_str


class SlotInUse(RuntimeError):
    """Another process holds the replication slot: a second relay must not produce."""


@dataclass(frozen=True)
class SlotState:
    name: str
    active_pid: int | None
    confirmed_flush_lsn: int | None
    snapshot_completed: bool


def slot_name_for(settings: CdcProcess) -> str:
    """Explicit FEED_CDC_SLOT_NAME, else feed_cdc_<database> (one slot per database)."""
    if settings.cdc_slot_name:
        return settings.cdc_slot_name
    safe = "".join(c if c.isalnum() else "_" for c in settings.pg_database.lower())
    return f"feed_cdc_{safe}"


def read_state(conn: psycopg.Connection, slot: str) -> SlotState | None:
    row = conn.execute(
        "SELECT s.active_pid, s.confirmed_flush_lsn::text, "
        "coalesce((SELECT r.snapshot_completed_at IS NOT NULL FROM cdc_relay_state r "
        "          WHERE r.slot_name = s.slot_name), false) "
        "FROM pg_replication_slots s WHERE s.slot_name = %s AND s.database = current_database()",
        (slot,)).fetchone()
    if row is None:
        return None
    return SlotState(slot, row[0], lsn_from_str(row[1]) if row[1] else None, bool(row[2]))


def refuse_if_active(state: SlotState | None) -> None:
    if state is not None and state.active_pid is not None:
        raise SlotInUse(
            f"replication slot {state.name!r} is in use by backend pid {state.active_pid}: "
            f"another relay is running on this database; refusing to start a second one")


def drop(conn: psycopg.Connection, slot: str) -> None:
    try:
        conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
    except psycopg.errors.ObjectInUse as exc:
        raise SlotInUse(f"replication slot {slot!r} became active while being dropped: "
                        f"another relay is starting") from exc
    conn.execute("DELETE FROM cdc_relay_state WHERE slot_name = %s", (slot,))


def record_snapshot_started(conn: psycopg.Connection, slot: str, consistent_point: str) -> None:
    conn.execute(
        "INSERT INTO cdc_relay_state (slot_name, consistent_point) VALUES (%s, %s) "
        "ON CONFLICT (slot_name) DO UPDATE SET consistent_point = excluded.consistent_point, "
        "snapshot_completed_at = NULL, snapshot_rows = 0", (slot, consistent_point))


def record_snapshot_completed(conn: psycopg.Connection, slot: str, rows: int) -> None:
    """Called only after Kafka acknowledged every snapshot record."""
    conn.execute("UPDATE cdc_relay_state SET snapshot_completed_at = now(), snapshot_rows = %s "
                 "WHERE slot_name = %s", (rows, slot))


def lag(conn: psycopg.Connection, slot: str) -> tuple[int, int] | None:
    """(bytes of WAL the slot still holds back, confirmed flush LSN), or None if no slot."""
    row = conn.execute(
        "SELECT (pg_current_wal_lsn() - confirmed_flush_lsn)::bigint, confirmed_flush_lsn::text "
        "FROM pg_replication_slots WHERE slot_name = %s", (slot,)).fetchone()
    if row is None or row[1] is None:
        return None
    return int(row[0]), lsn_from_str(row[1])
