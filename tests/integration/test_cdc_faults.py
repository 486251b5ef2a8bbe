"""CDC relay under faults: SIGKILL during a write burst, and a Postgres restart.

The ledger is the list of post ids whose INSERT committed (appended after COMMIT
returned). Nothing in it may be missing from Kafka. Each restarted relay resumes at the
slot's confirmed position, so every record a restarted relay produces must come from a
transaction after the position confirmed when the previous relay died: that is the
bound on duplicates.
"""
from __future__ import annotations

import random
import threading
import time

import psycopg

from services.common.settings import Settings
from tests.integration.test_cdc_relay import (confirmed_lsn, consume, relays, slot_row,  # noqa: F401
                                              source, wait_for, wait_streaming)

SNAPSHOT_ROWS = 1500
BURST_INSERTS = 3000
KILLS = 4


def _seed(s: Settings) -> None:
    with psycopg.connect(s.pg_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO users (user_id) SELECT g FROM generate_series(1, 10) g")
        conn.execute("INSERT INTO posts (post_id, author_id, created_at, text) "
                     "SELECT g, 1 + g %% 10, now(), 'seed ' || g FROM generate_series(1, %s) g",
                     (SNAPSHOT_ROWS,))


def _burst(s: Settings, ledger: list[int], done: threading.Event) -> None:
    """Single writer (transactions never interleave): 1-3 inserts per transaction."""
    rng = random.Random(7)
    next_id = 1_000_000
    with psycopg.connect(s.pg_dsn) as conn:
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


def _wait_released(s: Settings) -> None:
    wait_for(lambda: (row := slot_row(s)) is None or row[0] is None, 30, "slot released")


def test_sigkill_during_a_burst_loses_no_committed_change(source: Settings, relays) -> None:
    _seed(source)
    relay = relays(source)
    ledger: list[int] = []
    done = threading.Event()
    writer = threading.Thread(target=_burst, args=(source, ledger, done), daemon=True)
    writer.start()
    rng = random.Random()
    restarts: list[tuple[float, int | None]] = []  # (restart wall time, confirmed at kill)
    for _ in range(KILLS):
        time.sleep(rng.uniform(0.3, 2.0))
        relay.kill()
        _wait_released(source)
        row = slot_row(source)
        confirmed = confirmed_lsn(source) if row is not None and row[2] else None
        restarts.append((time.time(), confirmed))
        relay = relays(source)
    writer.join(120)
    assert done.is_set(), "writer did not finish"
    wait_streaming(source)
    wanted = set(ledger) | set(range(1, SNAPSHOT_ROWS + 1))

    def seen(events) -> set[int]:
        return {e.key["post_id"] for e in events
                if e.value and e.table == "posts" and e.value["op"] in ("c", "r")}

    events = consume(source, lambda ev: wanted <= seen(ev), timeout=180)
    assert not wanted - seen(events)
    # Duplicates only after the last confirmed position: everything a restarted relay
    # produced comes from at or after the position confirmed when its predecessor died.
    for (restarted_at, confirmed), (next_restart, _) in zip(
            restarts, restarts[1:] + [(float("inf"), None)]):
        if confirmed is None:
            continue  # killed before its snapshot completed: the snapshot was redone
        produced = [e for e in events if e.value and
                    restarted_at * 1000 <= e.timestamp_ms < next_restart * 1000]
        early = [e for e in produced
                 if e.value["op"] != "r" and e.value["source"]["lsn"] < confirmed]
        assert not early, f"{len(early)} records replayed from before the confirmed position"
    creates = [e.key["post_id"] for e in events if e.value and e.table == "posts"
               and e.value["op"] == "c"]
    print(f"ledger {len(ledger)}, create events {len(creates)}, "
          f"duplicates {len(creates) - len(set(creates))}")


def test_relay_rides_through_a_postgres_restart(source: Settings, relays) -> None:
    from deploy.stack import postgres
    from deploy.stack.layout import Layout

    with psycopg.connect(source.pg_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO users (user_id) VALUES (1)")
    relay = relays(source)
    wait_streaming(source)

    def write(first: int) -> None:
        with psycopg.connect(source.pg_dsn, autocommit=True) as conn:
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
