"""CDC relay under faults: SIGKILL during a write burst, and a Postgres restart.

The ledger is the list of post ids whose INSERT committed (appended after COMMIT
returned). Nothing in it may be missing from Kafka. Each restarted relay resumes at the
slot's confirmed position, so every record a restarted relay produces must come from a
transaction after the position confirmed when the previous relay died, and a duplicate
must also be of a transaction committed before that kill: docs/cdc.md's bound, checked
per duplicate.

A transaction's commit position is its commit's end LSN, the value the relay confirms.
Records carry it for the transaction before theirs (``source.sequence[0]``, Debezium's
lastCommitLsn), so the test reads it from the next transaction's records; a sentinel
transaction after the burst gives the last one a successor. The writer is single, so
transactions commit in txId order.
"""
from __future__ import annotations

import json
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass

from services.cdc.pgoutput import lsn_from_str
from services.shared.clients import pg
from services.shared.settings import Settings
from tests.support.cdc_relay import (Event, confirmed_lsn, consume, slot_row, wait_for,
                                     wait_streaming)

SNAPSHOT_ROWS = 1500
BURST_INSERTS = 3000
KILLS = 4
# A user written after the burst: its transaction gives the burst's last one a successor,
# whose records carry that last commit's position.
SENTINEL_USER = 11


def _seed(s: Settings) -> None:
    with pg.connect(s, autocommit=True) as conn:
        conn.execute("INSERT INTO users (user_id) SELECT g FROM generate_series(1, 10) g")
        conn.execute("INSERT INTO posts (post_id, author_id, created_at, text) "
                     "SELECT g, 1 + g %% 10, now(), 'seed ' || g FROM generate_series(1, %s) g",
                     (SNAPSHOT_ROWS,))


def _burst(s: Settings, ledger: list[int], done: threading.Event) -> None:
    """Single writer (transactions never interleave): 1-3 inserts per transaction."""
    rng = random.Random(7)
    next_id = 1_000_000
    with pg.connect(s) as conn:
        while len(ledger) < BURST_INSERTS:
            ids = list(range(next_id, next_id + rng.randint(1, 3)))
            next_id += len(ids)
            with conn.transaction():
                for pid in ids:
                    conn.execute("INSERT INTO posts (post_id, author_id, created_at, text) "
                                 "VALUES (%s, %s, now(), 'burst')", (pid, 1 + pid % 10))
                if rng.random() < 0.2:
                    conn.execute("UPDATE posts SET visibility = 1 - visibility WHERE post_id = %s",
                                 (ids[0],))
            ledger.extend(ids)
            if len(ledger) % 30 == 0:
                time.sleep(0.02)  # keep the burst going across several kills
    done.set()


@dataclass(frozen=True)
class Kill:
    """One SIGKILL of the relay, as the test observed it."""

    restarted_at_ms: float  # when the next relay was started: its records are stamped later
    confirmed: int | None  # slot's confirmed LSN at the kill; None: snapshot never completed
    wal_after: int  # WAL position read after the kill: every commit the dead relay saw is below


def _wait_released(s: Settings) -> None:
    wait_for(lambda: (row := slot_row(s)) is None or row[0] is None, 30, "slot released")


def _wal_lsn(s: Settings) -> int:
    with pg.connect(s, autocommit=True) as conn:
        return lsn_from_str(conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0])


def _relay_of(event: Event, kills: list[Kill]) -> int:
    """Which relay produced ``event``: 0 the first, k the one started after kill k."""
    return sum(1 for kill in kills if event.timestamp_ms >= kill.restarted_at_ms)


def _commit_ends(changes: list[Event]) -> dict[int, int]:
    """txId -> end LSN of its commit, for every streamed transaction with a successor."""
    previous: dict[int, int] = {}
    for e in changes:
        last_commit = json.loads(e.value["source"]["sequence"])[0]
        if last_commit is not None:  # None: the first transaction of a relay session
            previous.setdefault(e.value["source"]["txId"], int(last_commit))
    order = sorted({e.value["source"]["txId"] for e in changes})
    return {tx: previous[nxt] for tx, nxt in zip(order, order[1:]) if nxt in previous}


def _identity(e: Event) -> tuple:
    """A change: the same one whichever relay produced it (snapshot rows have no LSN)."""
    lsn = None if e.value["op"] == "r" else e.value["source"]["lsn"]
    return e.topic, json.dumps(e.key, sort_keys=True), e.value["op"], lsn


def assert_resumed_at_confirmed(events: list[Event], kills: list[Kill]) -> Counter[int]:
    """Check every record of a restarted relay against the kill before it; return the
    duplicates per relay.

    A relay started after kill k, which found the slot confirmed at C_k, produces only
    transactions committed after C_k, and never a snapshot row again. Its duplicates are
    of transactions committed in (C_k, WAL at kill k]. A relay started after a kill
    before the snapshot completed snapshots again: its duplicates are snapshot rows.
    """
    changes = [e for e in events if e.value is not None]
    ends = _commit_ends([e for e in changes if e.value["op"] != "r"])
    seen: set[tuple] = set()
    duplicates: Counter[int] = Counter()
    for e in sorted(changes, key=lambda e: (e.topic, e.partition, e.offset)):
        relay = _relay_of(e, kills)
        kill = kills[relay - 1] if relay else None
        op, tx = e.value["op"], e.value["source"]["txId"]
        end = ends.get(tx)
        if kill is not None and kill.confirmed is not None:
            assert op != "r", f"relay {relay} snapshotted again after a completed snapshot"
            assert end is None or end > kill.confirmed, (
                f"relay {relay} produced tx {tx} (commit end {end}), confirmed before it started "
                f"({kill.confirmed})")
        identity = _identity(e)
        if identity in seen:
            duplicates[relay] += 1
            assert kill is not None, f"the first relay produced {identity} twice"
            if kill.confirmed is None:
                assert op == "r", f"{identity}: only a redone snapshot repeats before streaming"
            elif end is None:  # no successor seen: the change's own LSN bounds it from above
                assert e.value["source"]["lsn"] < kill.wal_after, identity
            else:
                assert kill.confirmed < end <= kill.wal_after, (
                    f"duplicate {identity} of tx {tx} (commit end {end}) outside "
                    f"({kill.confirmed}, {kill.wal_after}], after the confirmed position at "
                    f"kill {relay} and before the kill")
        seen.add(identity)
    return duplicates


def test_sigkill_during_a_burst_loses_no_committed_change(source: Settings, relays) -> None:
    _seed(source)
    relay = relays(source)
    ledger: list[int] = []
    done = threading.Event()
    writer = threading.Thread(target=_burst, args=(source, ledger, done), daemon=True)
    writer.start()
    rng = random.Random()
    kills: list[Kill] = []
    for number in range(KILLS):
        if number:
            # Later kills count from the restarted relay's streaming, not its start: one
            # that lives past its first feedback (1 s) moves the confirmed position, so
            # the bound below moves between kills instead of staying where relay 0 left it.
            wait_streaming(source)
        time.sleep(rng.uniform(0.3, 2.0))
        relay.kill()
        _wait_released(source)
        row = slot_row(source)
        confirmed = confirmed_lsn(source) if row is not None and row[2] else None
        kills.append(Kill(wal_after=_wal_lsn(source), confirmed=confirmed,
                          restarted_at_ms=time.time() * 1000))
        relay = relays(source)
    writer.join(120)
    assert done.is_set(), "writer did not finish"
    with pg.connect(source, autocommit=True) as conn:
        conn.execute("INSERT INTO users (user_id) VALUES (%s)", (SENTINEL_USER,))
    written = _wal_lsn(source)
    wait_streaming(source)
    wanted = set(ledger) | set(range(1, SNAPSHOT_ROWS + 1))

    def seen(events) -> set[int]:
        return {e.key["post_id"] for e in events
                if e.value and e.table == "posts" and e.value["op"] in ("c", "r")}

    def sentinel(events) -> bool:
        return any(e.value and e.table == "users" and e.key["user_id"] == SENTINEL_USER
                   for e in events)

    events = consume(source, lambda ev: wanted <= seen(ev) and sentinel(ev), timeout=180)
    assert not wanted - seen(events)
    duplicates = assert_resumed_at_confirmed(events, kills)
    # The bound is only as good as the confirmed position moves: the last relay confirms
    # everything once it has caught up, so a later crash would replay none of this.
    wait_for(lambda: confirmed_lsn(source) >= written, 30, "the burst to be confirmed")
    creates = [e.key["post_id"] for e in events if e.value and e.table == "posts"
               and e.value["op"] == "c"]
    print(f"ledger {len(ledger)}, create events {len(creates)}, "
          f"duplicated creates {len(creates) - len(set(creates))}")
    # A relay killed before its first feedback (1 s after it streams) confirms nothing:
    # the next one replays from the same position, so quick kills add up duplicates.
    for number, kill in enumerate(kills, 1):
        window = "snapshot redone" if kill.confirmed is None else \
            f"confirmed {kill.confirmed}, {kill.wal_after - kill.confirmed} WAL bytes after it"
        print(f"kill {number}: {duplicates[number]} duplicates, {window}")


def test_relay_rides_through_a_postgres_restart(source: Settings, relays) -> None:
    from deploy.stack import postgres
    from deploy.stack.layout import Layout

    with pg.connect(source, autocommit=True) as conn:
        conn.execute("INSERT INTO users (user_id) VALUES (1)")
    relay = relays(source)
    wait_streaming(source)

    def write(first: int) -> None:
        with pg.connect(source, autocommit=True) as conn:
            for pid in range(first, first + 50):
                conn.execute("INSERT INTO posts (post_id, author_id, created_at, text) "
                             "VALUES (%s, 1, now(), 'x')", (pid,))

    write(1)
    postgres.restart(Layout.from_env())
    write(1000)
    wanted = set(range(1, 51)) | set(range(1000, 1050))
    events = consume(source, lambda ev: wanted <= {e.key["post_id"] for e in ev
                                                   if e.value and e.table == "posts"}, 120)
    assert wanted <= {e.key["post_id"] for e in events if e.value and e.table == "posts"}
    assert relay.proc.poll() is None, "the relay must reconnect, not exit"
    assert "reconnecting" in relay.log()
