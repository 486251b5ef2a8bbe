"""The visibility verifier: checks the copies each visibility-log entry covers against
Postgres, repairs those the pipeline left wrong, and moves the marks that let API
processes forget entries (migration 0004, docs/fanout.md "The visibility verifier").

One fan-out process at a time runs it: the one holding a session-level advisory lock
(``pg_try_advisory_lock``) on its own connection; the others try again every
``visibility_verify_every_s``. Every statement of a walk goes over that connection, so a
process that lost it (and so the lock) fails its next statement and stops.

A walk (every ``visibility_verify_every_s``) reads the entries after ``checked`` in seq
order, ``visibility_verify_batch`` at a time, and compares the copies each one covers
with Postgres's rows now (copy_audit.py). An entry whose copies are right is verified; a
wrong one younger than ``visibility_repair_after_s`` stops the walk (the pipeline may be
applying it); an older wrong one is repaired (``feed_visibility_repairs_total``, a
WARNING naming the entry), then verified. ``checked`` moves to the end of the verified
run; ``upto`` to the highest ``checked`` that has stood ``visibility_settle_s`` (longer
than any API process may serve a cached copy), and the entries up to it are deleted.
The times of the ``checked`` marks are kept in memory (``SettleMarks``): after a
restart, or when another process takes the lock, what lies between ``upto`` and
``checked`` waits one settle time more.

Errors (a store down, the lock's connection lost) are logged and retried at the next
interval, backing off to ``MAX_BACKOFF_S``: they never stop the fan-out.
"""
from __future__ import annotations

import logging
import math
import time
from collections import Counter as Tally
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Collection, Iterable, Sequence

from services.shared.clients import pg
from services.shared.contracts.visibility_log import LOG_HEAD
from services.shared.settings import FanoutProcess

from .copy_audit import AsyncConn, CopyAudit, Key, RepairOutcome, WritersStillOpen
from .metrics import (VISIBILITY_OLDEST_UNVERIFIED, VISIBILITY_REPAIRS, VISIBILITY_UNVERIFIED,
                      VISIBILITY_VERIFIED, VISIBILITY_VERIFIER_ACTIVE)

log = logging.getLogger(__name__)

# The advisory lock's key, and the name the verifier's connections carry in
# pg_stat_activity (docs/operations.md: finding the holder).
LOCK_NAME = "feed.visibility_verifier"
APPLICATION_NAME = "feed-visibility-verifier"
# Longest wait between attempts after failures (doubling from the interval).
MAX_BACKOFF_S = 60.0
# Entries deleted per statement once released.
DELETE_CHUNK = 5000
# A statement of the verifier's that takes longer is cancelled (the walk fails, retried).
STATEMENT_TIMEOUT_MS = 30_000


@dataclass(frozen=True)
class Entry:
    """One entry of ``visibility_changes`` as the verifier reads it."""

    seq: int
    kind: str
    subject_id: int
    object_id: int
    hidden: bool
    age_s: float   # Postgres's now() minus its changed_at, when read

    @property
    def key(self) -> Key:
        return Key(self.kind, self.subject_id, self.object_id)


@dataclass(frozen=True)
class Walk:
    """What a batch's entries come to, in seq order."""

    verified: tuple[Entry, ...]   # the contiguous run from the first entry
    repairs: tuple[Entry, ...]    # the first entry of each key to repair (within ``verified``)
    held_by: Entry | None         # the wrong, young entry the run stopped at


def plan_walk(entries: Iterable[Entry], wrong: Collection[Key], repair_after_s: float) -> Walk:
    """Pure. An entry whose key is not ``wrong`` is verified; the first entry of a wrong
    key is a repair when it is at least ``repair_after_s`` old (later entries of a key
    being repaired are covered by it: the repair writes the truth now), else it stops
    the run. ``repair_after_s`` infinite: every wrong key stops the run."""
    verified: list[Entry] = []
    repairs: list[Entry] = []
    repairing: set[Key] = set()
    for entry in entries:
        key = entry.key
        if key in wrong and key not in repairing:
            if not entry.age_s >= repair_after_s:
                return Walk(tuple(verified), tuple(repairs), entry)
            repairing.add(key)
            repairs.append(entry)
        verified.append(entry)
    return Walk(tuple(verified), tuple(repairs), None)


def still_wrong(wrong: Collection[Key], planned: Collection[Key],
                outcome: RepairOutcome | None) -> set[Key]:
    """Pure. The keys that still hold the walk after the repairs were attempted: every
    wrong key when no repair could be made (``outcome`` None), else those not planned
    and those whose repair did not take."""
    if outcome is None:
        return set(wrong)
    return (set(wrong) - set(planned)) | set(outcome.stuck)


class SettleMarks:
    """The ``checked`` marks not yet settled, with when each was reached (a monotonic
    clock). Pure: the caller passes the times."""

    def __init__(self) -> None:
        self._pending: deque[tuple[int, float]] = deque()

    def reset(self, upto: int, checked: int, now: float) -> None:
        """A fresh start (a restart, the lock taken): what lies between the marks counts
        as verified now."""
        self._pending.clear()
        if checked > upto:
            self._pending.append((checked, now))

    def verified(self, seq: int, now: float) -> None:
        if not self._pending or seq > self._pending[-1][0]:
            self._pending.append((seq, now))

    def settled(self, now: float, settle_s: float) -> int | None:
        """The highest mark reached at least ``settle_s`` before ``now`` (dropped from
        the pending ones), or None."""
        out = None
        while self._pending and self._pending[0][1] <= now - settle_s:
            out = self._pending.popleft()[0]
        return out

    def __len__(self) -> int:
        return len(self._pending)


_ENTRIES = ("SELECT seq, kind, subject_id, object_id, hidden,"
            " extract(epoch FROM now() - changed_at)::float8"
            " FROM visibility_changes WHERE seq > %s ORDER BY seq LIMIT %s")
_HEAD = LOG_HEAD
_BACKLOG = ("SELECT count(*), coalesce(extract(epoch FROM now() - min(changed_at))::float8, 0)"
            " FROM visibility_changes WHERE seq > %s")
_SAVE = ("UPDATE visibility_verified SET checked = GREATEST(checked, %s), upto = GREATEST(upto, %s),"
         " updated_at = now() RETURNING upto, checked")
_DELETE = ("DELETE FROM visibility_changes WHERE seq IN"
           " (SELECT seq FROM visibility_changes WHERE seq <= %s ORDER BY seq LIMIT %s)")


class Verifier:
    """``tick()`` every ``visibility_verify_every_s`` (the fan-out's timer): takes the lock
    if it can, then walks. Never raises (but for cancellation)."""

    def __init__(self, settings: FanoutProcess, audit: CopyAudit, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._settings = settings
        self._audit = audit
        self._clock = clock
        self._every_s = settings.visibility_verify_every_s
        self._batch = max(1, settings.visibility_verify_batch)
        self._repair_after_s = settings.visibility_repair_after_s
        self._settle_s = settings.visibility_settle_s
        self._conn: AsyncConn | None = None
        self._holding = False
        self._marks = SettleMarks()
        self.upto = 0
        self.checked = 0
        self._failures = 0
        self._next_try = 0.0
        self._oldest: tuple[float, float] | None = None   # (age read, when), on the holder

    @property
    def active(self) -> bool:
        """Whether this process holds the verifier's lock."""
        return self._holding

    @property
    def failures(self) -> int:
        """Walks failed in a row (0 after one that completed)."""
        return self._failures

    async def tick(self) -> None:
        now = self._clock()
        if self._holding and self._oldest is not None and self._oldest[0] > 0:
            # Grows while walks fail, so a stuck verifier still shows (and alerts).
            VISIBILITY_OLDEST_UNVERIFIED.set(self._oldest[0] + now - self._oldest[1])
        if now < self._next_try:
            return
        try:
            if not self._holding and not await self._take_lock():
                return
            await self.walk()
        except Exception:  # noqa: BLE001 - the fan-out goes on; the next interval retries
            self._failures += 1
            backoff = min(MAX_BACKOFF_S, self._every_s * 2 ** self._failures)
            self._next_try = self._clock() + backoff
            log.warning("visibility verifier: failed (%d in a row); next try in %.0f s",
                        self._failures, backoff, exc_info=True)
            conn = self._conn
            if conn is not None and (conn.broken or conn.closed):
                await self._drop()
        else:
            self._failures = 0

    async def _take_lock(self) -> bool:
        if self._conn is None:
            conn = await pg.async_connect(self._settings, autocommit=True, connect_timeout=5,
                                          application_name=APPLICATION_NAME, keepalives=1,
                                          keepalives_idle=10, keepalives_interval=5, keepalives_count=3)
            await conn.execute(f"SET statement_timeout = {STATEMENT_TIMEOUT_MS}")
            self._conn = conn
        row = await self._one(self._conn, "SELECT pg_try_advisory_lock(hashtextextended(%s, 0))",
                              (LOCK_NAME,))
        if not row[0]:
            return False
        upto, checked = await self._one(self._conn, "SELECT upto, checked FROM visibility_verified")
        self.upto, self.checked = int(upto), int(checked)
        self._marks.reset(self.upto, self.checked, self._clock())
        self._holding = True
        VISIBILITY_VERIFIER_ACTIVE.set(1)
        log.info("visibility verifier: lock taken (upto %d, checked %d)", self.upto, self.checked)
        return True

    async def _drop(self, lost: bool = True) -> None:
        conn, self._conn = self._conn, None
        if self._holding and lost:
            log.warning("visibility verifier: lock connection lost; another process may take over")
        self._holding = False
        self._oldest = None
        VISIBILITY_VERIFIER_ACTIVE.set(0)
        VISIBILITY_OLDEST_UNVERIFIED.set(0)
        VISIBILITY_UNVERIFIED.set(0)
        if conn is not None:
            try:
                await conn.close()
            except Exception:  # noqa: BLE001 - it is being thrown away
                pass

    async def close(self) -> None:
        """Close the connection (which releases the lock)."""
        await self._drop(lost=False)

    # -- one walk ----------------------------------------------------------------------
    async def walk(self) -> None:
        """Every batch after ``checked`` until one stops short, then the marks."""
        conn = self._conn
        assert conn is not None and self._holding
        await self._after_restore(conn)
        await self._backlog(conn)
        while True:
            cur = await conn.execute(_ENTRIES, (self.checked, self._batch))
            entries = [Entry(int(r[0]), r[1], int(r[2]), int(r[3]), bool(r[4]), float(r[5]))
                       for r in await cur.fetchall()]
            if not entries:
                break
            walked = await self._batch_of(conn, entries)
            if walked.verified:
                self.checked = walked.verified[-1].seq
                self._marks.verified(self.checked, self._clock())
            await self._save(conn)
            if walked.held_by is not None or len(walked.verified) < len(entries) \
                    or len(entries) < self._batch:
                break
        await self._save(conn)
        await self._backlog(conn)

    async def _batch_of(self, conn: AsyncConn, entries: Sequence[Entry]) -> Walk:
        wrong = await self._audit.check(conn, (e.key for e in entries))
        first = plan_walk(entries, wrong.keys(), self._repair_after_s)
        planned = {e.key for e in first.repairs}
        outcome: RepairOutcome | None = None
        if planned:
            try:
                outcome = await self._audit.repair(conn, planned)
            except WritersStillOpen as exc:
                log.warning("visibility verifier: repairs wait for the next walk: %s", exc)
        walked = plan_walk(entries, still_wrong(wrong.keys(), planned, outcome), math.inf)
        if outcome is not None:
            for entry in first.repairs:
                diffs = outcome.repaired.get(entry.key)
                if diffs is not None:
                    VISIBILITY_REPAIRS.labels(entry.kind).inc()
                    log.warning("visibility verifier: repaired the copies of entry %d (%s %d -> %d, "
                                "hidden=%s, %.1f s old) at LSN %d: %s", entry.seq, entry.kind,
                                entry.subject_id, entry.object_id, entry.hidden, entry.age_s,
                                outcome.lsn, _describe(diffs))
            for key, diffs in outcome.stuck.items():
                log.warning("visibility verifier: the repair of %s did not take (a copy written "
                            "above Postgres's WAL position?): %s", key, _describe(diffs))
        for kind, n in Tally(e.kind for e in walked.verified).items():
            VISIBILITY_VERIFIED.labels(kind).inc(n)
        if walked.held_by is not None:
            held = walked.held_by
            log.debug("visibility verifier: entry %d (%s %d -> %d, %.1f s old) not applied yet",
                      held.seq, held.kind, held.subject_id, held.object_id, held.age_s)
        return walked

    async def _after_restore(self, conn: AsyncConn) -> None:
        """A log whose head is below ``checked`` went back (a restore, a reset sequence):
        the marks are taken from the row again (0 if it is above the head too) and written
        as they are (not the greater of old and new), so no API process forgets a new
        entry numbered below the old marks."""
        head = int((await self._one(conn, _HEAD))[0])
        if head >= self.checked:
            return
        log.warning("visibility verifier: the log's head %d is below checked %d (a restore?): "
                    "marks taken again", head, self.checked)
        upto, checked = await self._one(conn, "SELECT upto, checked FROM visibility_verified")
        # A restored row agrees with its restored log; one above the head (the sequence
        # reset alone) says nothing of the new entries: walk them all again.
        self.upto, self.checked = (int(upto), int(checked)) if int(checked) <= head else (0, 0)
        await conn.execute("UPDATE visibility_verified SET upto = %s, checked = %s, updated_at = now()",
                           (self.upto, self.checked))
        self._marks.reset(self.upto, self.checked, self._clock())

    async def _save(self, conn: AsyncConn) -> None:
        """Write the marks (``upto``: the highest that has settled), then delete what
        ``upto`` releases."""
        settled = self._marks.settled(self._clock(), self._settle_s)
        upto = max(self.upto, settled or 0)
        row = await self._one(conn, _SAVE, (self.checked, upto))
        self.upto, self.checked = int(row[0]), max(self.checked, int(row[1]))
        while True:
            cur = await conn.execute(_DELETE, (self.upto, DELETE_CHUNK))
            if cur.rowcount < DELETE_CHUNK:
                break

    async def _backlog(self, conn: AsyncConn) -> None:
        count, oldest = await self._one(conn, _BACKLOG, (self.checked,))
        VISIBILITY_UNVERIFIED.set(int(count))
        VISIBILITY_OLDEST_UNVERIFIED.set(float(oldest))
        self._oldest = (float(oldest), self._clock())

    @staticmethod
    async def _one(conn: AsyncConn, sql: str, params: Sequence[Any] = ()) -> Any:
        cur = await conn.execute(sql, params)
        row = await cur.fetchone()
        assert row is not None, sql
        return row


def _describe(diffs: Iterable[Any]) -> str:
    return "; ".join(f"{d.part}: postgres {d.truth}, copy {d.copy}" for d in diffs)
