"""The CDC relay as the tests run it: a fresh migrated database and topic prefix per test
(``source``), ``python -m services.cdc`` subprocesses (``relays``), the slot's state, and
reading the CDC topics back (``consume``). The fixtures are registered for every test by
``tests/conftest.py`` (``pytest_plugins``)."""
from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from deploy.migrate import migrate_kafka, migrate_postgres
from services.cdc.pgoutput import lsn_from_str
from services.cdc.slot import slot_name_for
from services.shared.clients import kafka, pg
from services.shared.contracts.topics import CAPTURED_TABLES, cdc_topic
from services.shared.settings import Settings
from tests.support.processes import drop_database_with_slots, free_port
from tests.support.waiting import wait_until

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# How long teardown waits for a stopped relay to release its slot and connections.
TEARDOWN_DEADLINE_S = 60
_counter = itertools.count(1)


def wait_for(condition: Callable[[], object], timeout: float, message: str) -> object:
    return wait_until(condition, timeout=timeout, interval=0.1, message=message)


@pytest.fixture
def source(settings: Settings) -> Iterator[Settings]:
    """A fresh migrated database + topic prefix for one test; slots dropped afterwards."""
    name = f"{settings.pg_database}_cdc{next(_counter)}"
    with pg.connect(settings, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    s = settings.model_copy(update={"pg_database": name, "topic_prefix": name,
                                    "cdc_metrics_port": free_port()})
    migrate_postgres(s)
    migrate_kafka(s, name)
    yield s
    drop_database_with_slots(settings, name, TEARDOWN_DEADLINE_S)


@dataclass
class RelayProcess:
    proc: subprocess.Popen
    log_path: str

    def log(self) -> str:
        with open(self.log_path) as fh:
            return fh.read()

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture
def relays(tmp_path) -> Iterator[Callable[..., RelayProcess]]:
    """Start ``python -m services.cdc`` subprocesses; all are stopped at the end."""
    started: list[RelayProcess] = []

    def start(s: Settings, **extra: str) -> RelayProcess:
        env = {**os.environ, "FEED_PG_DATABASE": s.pg_database, "FEED_TOPIC_PREFIX": s.topic_prefix,
               "FEED_PG_HOST": s.pg_host, "FEED_PG_PORT": str(s.pg_port),
               "FEED_KAFKA_BOOTSTRAP": s.kafka_bootstrap,
               "FEED_CDC_METRICS_PORT": str(free_port()),
               "FEED_CDC_HEARTBEAT_INTERVAL_S": "1", **extra}
        log_path = str(tmp_path / f"relay{len(started)}.log")
        with open(log_path, "w") as log:
            proc = subprocess.Popen([sys.executable, "-m", "services.cdc"], cwd=REPO, env=env,
                                    stdout=log, stderr=subprocess.STDOUT)
        relay = RelayProcess(proc, log_path)
        started.append(relay)
        return relay

    yield start
    for relay in started:
        relay.stop()


def slot_row(s: Settings) -> tuple | None:
    with pg.connect(s, autocommit=True) as conn:
        return conn.execute(
            "SELECT s.active_pid, s.confirmed_flush_lsn::text, r.snapshot_completed_at "
            "FROM pg_replication_slots s LEFT JOIN cdc_relay_state r USING (slot_name) "
            "WHERE s.slot_name = %s", (slot_name_for(s),)).fetchone()


def wait_streaming(s: Settings, timeout: float = 60) -> None:
    wait_for(lambda: (row := slot_row(s)) and row[0] and row[2], timeout, "relay streaming")


def confirmed_lsn(s: Settings) -> int:
    row = slot_row(s)
    assert row is not None
    return lsn_from_str(row[1])


@dataclass(frozen=True)
class Event:
    topic: str
    partition: int
    offset: int
    key: dict | None
    value: dict | None
    timestamp_ms: int

    @property
    def table(self) -> str:
        return self.topic.rsplit(".", 1)[-1]


def consume(s: Settings, until: Callable[[list[Event]], bool], timeout: float = 60,
            topics: list[str] | None = None) -> list[Event]:
    """Read the CDC topics from the start until ``until(events)`` holds."""
    consumer = kafka.consumer(s, {"group.id": str(uuid.uuid4()),
                                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe(topics or [cdc_topic(t, s.topic_prefix) for t in CAPTURED_TABLES])
    events: list[Event] = []
    deadline = time.monotonic() + timeout
    try:
        while not until(events):
            if time.monotonic() > deadline:
                raise AssertionError(f"only {len(events)} events after {timeout:.0f} s")
            for msg in consumer.consume(500, 0.5):
                if msg.error():
                    continue
                events.append(Event(msg.topic(), msg.partition(), msg.offset(),
                                    json.loads(msg.key()) if msg.key() else None,
                                    json.loads(msg.value()) if msg.value() else None,
                                    msg.timestamp()[1]))
    finally:
        consumer.close()
    return events


def changes(events: list[Event]) -> list[Event]:
    return [e for e in events if e.value is not None]
