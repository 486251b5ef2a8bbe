"""The ``lost-hide`` scenario: hides whose change events never reach the copies.

The relay is frozen (SIGSTOP), its walsender ended and its replication slot dropped, for
``hold_s`` of the workload's deletes, removals, blocks, mutes and unfollows; then the relay is
let go. It finds no slot, creates one and snapshots every captured table again
(docs/cdc.md): a snapshot emits ``op: "r"`` only for rows that still exist, so an
unfollow made meanwhile (the follows row deleted, also by a block), or an unblock,
unmute or unsuspend, never reaches Cassandra. Those are the hides lost. Only the visibility fence hides them, and only the
verifier (services/fanout/verifier.py) can repair them before the fence lets them go.

``audit`` counts them once the fan-out has applied the relay's new snapshot and before
the verifier may repair (the fault suite runs the services with
``FEED_VISIBILITY_REPAIR_AFTER_S`` 150 s and ``FEED_VISIBILITY_SETTLE_S`` 10 s, instead of
120 s and 360 s): the keys of the log's entries made from the hold's start to just after
it whose copies differ from Postgres. ``settle`` then waits until the verifier has
checked past them and released them, and reads how many it repaired
(``feed_visibility_repairs_total`` on the fan-out's /metrics) and what still differs.
The target: repairs = lost, none left, and the checker's ``shown_after_ack`` 0 for the
whole run. From the lift until the entries are released the workload's block, mute,
follow and suspension toggles pause (posting, deletes, likes and reads go on): a later write to a pair sets its
copies through the working pipeline, healing a lost hide before the verifier gets to it.
"""
from __future__ import annotations

import asyncio
import os
import signal
import time
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from cassandra.cluster import Session

from services.fanout.account_events import AccountCopy
from services.fanout.copies import CopyStore
from services.fanout.copy_audit import CopyAudit, Key
from services.shared.clients import cql, pg
from services.shared.contracts.edge_counts import EdgeCounted
from services.shared.settings import Settings
from services.shared.stores.cql_async import CqlRunner

# After the new snapshot is complete, the copies are audited this often until three
# audits agree (the fan-out has applied the snapshot), and at the latest this long
# before the hold's first entry is FEED_VISIBILITY_REPAIR_AFTER_S old.
AUDIT_EVERY_S = 5.0
STABLE_AUDITS = 3
AUDIT_MARGIN_S = 10.0
# Entries made up to this long after SIGCONT are audited (the relay reconnects and
# creates its slot within it); later ones flowed through the new slot.
RECENT_S = 5.0
# How long ``settle`` waits for the verifier to check past the audited entries.
VERIFY_LIMIT_S = 300.0


@dataclass
class LostHide:
    held_from: float = 0.0
    held_until: float = 0.0
    slot: str = ""
    snapshot_completed_s: float | None = None   # after the relay was let go
    keys: list[Key] = field(default_factory=list)
    last_seq: int = 0                            # the newest entry audited
    lost: int = 0                                # keys whose copies differed
    lost_by_kind: dict[str, int] = field(default_factory=dict)
    repairs_before: float = 0.0
    audits: list[int] = field(default_factory=list)  # differing keys at each audit

    def as_dict(self) -> dict[str, Any]:
        return {"held_s": round(self.held_until - self.held_from, 1), "slot": self.slot,
                "snapshot_completed_after_s": self.snapshot_completed_s,
                "entries_keys_audited": len(self.keys), "lost": self.lost,
                "lost_by_kind": self.lost_by_kind, "audits": self.audits}


def fanout_repairs(settings: Settings) -> float:
    """``feed_visibility_repairs_total`` summed over its kinds, from the fan-out's /metrics."""
    url = f"http://{settings.metrics_host}:{settings.fanout_metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as r:
        return sum(float(line.rsplit(" ", 1)[1]) for line in r.read().decode().splitlines()
                   if line.startswith("feed_visibility_repairs_total{"))


def _drop_slot(settings: Settings, slot: str) -> None:
    """End the frozen relay's walsender and drop its slot (the slot frees when the
    walsender has gone)."""
    with pg.connect(settings, autocommit=True) as conn:
        deadline = time.monotonic() + 20
        while True:
            conn.execute("SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots "
                         "WHERE slot_name = %s AND active_pid IS NOT NULL", (slot,))
            try:
                conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
                return
            except Exception:  # noqa: BLE001 - still active: the backend is exiting
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)


async def lose_the_slot(settings: Settings, relay_pid: int | None, hold_s: float,
                        injected: list[str]) -> LostHide:
    from services.cdc.slot import slot_name_for
    if relay_pid is None:
        raise RuntimeError("lost-hide: the relay is not running")
    lost = LostHide(slot=slot_name_for(settings), repairs_before=fanout_repairs(settings))
    os.kill(relay_pid, signal.SIGSTOP)
    injected.append(f"SIGSTOP cdc (pid {relay_pid}) at {time.strftime('%H:%M:%S')}")
    lost.held_from = time.time()
    try:
        await asyncio.to_thread(_drop_slot, settings, lost.slot)
        injected.append(f"slot {lost.slot} dropped at {time.strftime('%H:%M:%S')}")
        await asyncio.sleep(hold_s)
    finally:
        lost.held_until = time.time()
        os.kill(relay_pid, signal.SIGCONT)
        injected.append(f"SIGCONT cdc (pid {relay_pid}) at {time.strftime('%H:%M:%S')}: "
                        f"it finds no slot and snapshots again")
    return lost


def _snapshot_completed(settings: Settings, slot: str, after: float) -> bool:
    with pg.connect(settings, autocommit=True) as conn:
        row = conn.execute("SELECT extract(epoch FROM snapshot_completed_at) FROM cdc_relay_state "
                           "WHERE slot_name = %s", (slot,)).fetchone()
    return row is not None and row[0] is not None and float(row[0]) >= after


def _entries(settings: Settings, since: float, until: float) -> tuple[list[Key], int]:
    """Keys of the log's entries made in [since, until], and the newest entry's seq."""
    with pg.connect(settings, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT seq, kind, subject_id, object_id FROM visibility_changes "
            "WHERE changed_at BETWEEN to_timestamp(%s) AND to_timestamp(%s) ORDER BY seq",
            (since, until)).fetchall()
    keys = list(dict.fromkeys(Key(kind, subject, obj) for _seq, kind, subject, obj in rows))
    return keys, max((r[0] for r in rows), default=0)


async def _no_counts(change: EdgeCounted) -> None:
    raise AssertionError(f"the audit writes nothing: {change}")


async def _differing(settings: Settings, session: Session, keys: list[Key]) -> dict[Key, Any]:
    runner = CqlRunner(session)
    # The account copy too: the workload's suspensions and unsuspends make 'account' entries.
    audit = CopyAudit(session, runner, CopyStore(session, runner, settings.fanout_follower_page),
                      _no_counts, accounts=AccountCopy(session, runner))
    async with await pg.async_connect(settings, autocommit=True, connect_timeout=10) as conn:
        return await audit.check(conn, keys)


async def audit(settings: Settings, lost: LostHide, injected: list[str]) -> None:
    """Wait for the relay's new snapshot; then count the hides lost: the keys whose copies
    still differ once the fan-out has applied the snapshot (the count no longer falls
    between two audits ``AUDIT_EVERY_S`` apart), before the verifier may repair any."""
    let_go = lost.held_until
    deadline = time.monotonic() + 120
    while not await asyncio.to_thread(_snapshot_completed, settings, lost.slot, let_go):
        if time.monotonic() > deadline:
            raise RuntimeError("lost-hide: the relay did not complete a new snapshot in 120 s")
        await asyncio.sleep(1.0)
    lost.snapshot_completed_s = round(time.time() - let_go, 1)
    injected.append(f"new snapshot completed {lost.snapshot_completed_s} s after SIGCONT")
    # The first repair may come FEED_VISIBILITY_REPAIR_AFTER_S after the hold began.
    last_chance = lost.held_from + settings.visibility_repair_after_s - AUDIT_MARGIN_S
    counts: list[int] = []
    while True:
        await asyncio.sleep(AUDIT_EVERY_S)
        # Up to a few seconds ago, not only to SIGCONT: what was written between the
        # relay's return and its new slot's creation is lost too. Later entries have had
        # seconds to flow through the new slot, so they do not count as lost.
        keys, last_seq = await asyncio.to_thread(_entries, settings, lost.held_from, let_go + RECENT_S)
        session = cql.session(settings)
        try:
            differing = await _differing(settings, session, keys)
        finally:
            session.cluster.shutdown()
        counts.append(len(differing))
        if (len(counts) >= STABLE_AUDITS and len(set(counts[-STABLE_AUDITS:])) == 1) \
                or time.time() + AUDIT_EVERY_S > last_chance:
            break
    lost.keys, lost.last_seq, lost.lost = keys, last_seq, len(differing)
    lost.audits = counts
    for key in differing:
        lost.lost_by_kind[key.kind] = lost.lost_by_kind.get(key.kind, 0) + 1
    injected.append(f"audit: {lost.lost} of {len(lost.keys)} keys touched from the hold to "
                    f"{RECENT_S:.0f} s after it differ from Postgres (hides lost: {lost.lost_by_kind}; "
                    f"audits {counts})")


def _marks(settings: Settings) -> tuple[int, int]:
    with pg.connect(settings, autocommit=True) as conn:
        row = conn.execute("SELECT checked, upto FROM visibility_verified").fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


async def settle(settings: Settings, lost: LostHide) -> dict[str, Any]:
    """Wait until the verifier has checked and released every audited entry; then what it
    repaired and what still differs."""
    started = time.monotonic()
    released = False
    while time.monotonic() - started < VERIFY_LIMIT_S:
        checked, upto = await asyncio.to_thread(_marks, settings)
        if upto >= lost.last_seq:
            released = True
            break
        await asyncio.sleep(2.0)
    repairs = fanout_repairs(settings) - lost.repairs_before
    session = cql.session(settings)
    try:
        left = await _differing(settings, session, lost.keys)
    finally:
        session.cluster.shutdown()
    return {**lost.as_dict(), "released": released,
            "released_after_s": round(time.monotonic() - started, 1),
            "repairs": int(repairs), "still_differing": len(left),
            "still_differing_examples": [list(k) for k in list(left)[:5]],
            "ok": released and lost.lost > 0 and int(repairs) == lost.lost and not left}
