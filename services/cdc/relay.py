"""The relay process: slot set-up, first snapshot, streaming, feedback and reconnection.

One session = one replication connection. A session ends on any connection or delivery
error; ``run`` starts a new one after a back-off, resuming from the slot's confirmed
position (so what was not confirmed is sent again: at-least-once). Errors that a retry
cannot fix (slot held by another relay, a column type without rendering) end the process.
"""
from __future__ import annotations

import logging
import select
import threading
import time
from typing import Callable

import psycopg
import psycopg2
import psycopg2.errors
from psycopg2.extras import ReplicationCursor

from services.shared.clients import pg
from services.shared.contracts.topics import heartbeat_topic
from services.shared.settings import CdcProcess

from . import catalog, metrics, slot
from .ack_frontier import AckFrontier
from .health import BACKING_OFF, CONNECTING, SNAPSHOT, STREAMING, RelayStatus
from .column_rendering import UnsupportedColumnType
from .envelope import MappingOptions, heartbeat_record
from .pgoutput import lsn_from_str, lsn_to_str
from .publisher import DeliveryFailed, KafkaPublisher
from .snapshot import snapshot_records
from .stream import ChangeStreamer

log = logging.getLogger(__name__)

# Longest wait for WAL before serving Kafka callbacks and timers again: short enough that
# acks turn into confirmed positions promptly, long enough not to spin an idle CPU.
IDLE_WAIT_S = 0.05
# How often slot lag (bytes) is read from pg_replication_slots: a cheap catalog query,
# and scrape intervals are rarely under 5 s.
LAG_REFRESH_S = 5.0
# Reconnection back-off: first retry after a second (a Postgres restart takes about
# that), doubling up to 30 s so a long outage does not flood the server log.
BACKOFF_FIRST_S, BACKOFF_MAX_S = 1.0, 30.0
# A session that ran this long counts as healthy: the back-off starts again from the top.
HEALTHY_SESSION_S = 30.0

FATAL = (slot.SlotInUse, UnsupportedColumnType, LookupError)
# How long the loop may be silent while Postgres makes a new slot (/healthz).
SLOT_CREATION_PAUSE_S = 600.0


def _now_us() -> int:
    return time.time_ns() // 1000


def mapping_options(settings: CdcProcess) -> MappingOptions:
    return MappingOptions(topic_prefix=settings.topic_prefix, database=settings.pg_database,
                          decimal_mode=settings.cdc_decimal_handling_mode,
                          unknown_types=settings.cdc_unknown_types,
                          tombstones_on_delete=settings.cdc_tombstones_on_delete)


class Relay:
    def __init__(self, settings: CdcProcess, stop: threading.Event | None = None,
                 clock_us: Callable[[], int] = _now_us, status: RelayStatus | None = None) -> None:
        self.settings = settings
        self.stop = stop or threading.Event()
        self.clock_us = clock_us
        self.slot = slot.slot_name_for(settings)
        self.options = mapping_options(settings)
        # What the session is doing and the loop's pulse: the relay's /healthz and
        # /readyz (health.py).
        self.status = status or RelayStatus()

    def run(self) -> None:
        """Run sessions until stopped; raises only the errors a retry cannot fix."""
        backoff = BACKOFF_FIRST_S
        while not self.stop.is_set():
            started = time.monotonic()
            self.status.enter(CONNECTING, f"slot {self.slot}")
            try:
                self.run_session()
            except FATAL:
                metrics.ERRORS.labels("fatal").inc()
                raise
            except (psycopg2.Error, psycopg.Error, DeliveryFailed, OSError) as exc:
                metrics.ERRORS.labels(type(exc).__name__).inc()
                if time.monotonic() - started > HEALTHY_SESSION_S:
                    backoff = BACKOFF_FIRST_S
                log.warning("cdc session ended (%s: %s); reconnecting in %.0f s",
                            type(exc).__name__, str(exc).strip(), backoff)
                self.status.enter(BACKING_OFF, f"{type(exc).__name__}: {str(exc).strip()}"[:300])
                with self.status.pulse.pausing(backoff + 1, f"backing off {backoff:.0f} s"):
                    self.stop.wait(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX_S)

    def run_session(self) -> None:
        with pg.connect(self.settings, autocommit=True) as conn:
            state = slot.read_state(conn, self.slot)
            slot.refuse_if_active(state)
            repl = pg.replication_connect(self.settings)
            publisher = KafkaPublisher(self.settings, on_wait=self.status.pulse.beat)
            try:
                cur = repl.cursor()
                if state is None or not state.snapshot_completed:
                    if state is not None:
                        log.warning("slot %s exists but its snapshot never completed: "
                                    "dropping it and snapshotting again", self.slot)
                        slot.drop(conn, self.slot)
                    start = self._create_slot_and_snapshot(cur, conn, publisher)
                else:
                    start = state.confirmed_flush_lsn or 0
                self._stream(cur, conn, publisher, start)
            finally:
                try:
                    with self.status.pulse.pausing(31, "flushing to Kafka"):
                        publisher.flush(timeout=30)
                except DeliveryFailed:
                    pass
                publisher.close_trace()
                repl.close()

    def _create_slot_and_snapshot(self, cur: ReplicationCursor, conn: psycopg.Connection,
                                  publisher: KafkaPublisher) -> int:
        try:
            # A logical slot is made once every transaction open now has ended: as long
            # as the longest of them, not a stalled loop.
            with self.status.pulse.pausing(SLOT_CREATION_PAUSE_S, "creating the slot (open transactions end first)"):
                cur.execute(f'CREATE_REPLICATION_SLOT "{self.slot}" LOGICAL pgoutput EXPORT_SNAPSHOT')
        except psycopg2.errors.DuplicateObject as exc:
            raise slot.SlotInUse(f"replication slot {self.slot!r} was just created by "
                                 f"another relay; refusing to start a second one") from exc
        created = cur.fetchone()
        assert created is not None  # CREATE_REPLICATION_SLOT answers with one row
        _name, consistent_point, snapshot_name, _plugin = created
        slot.record_snapshot_started(conn, self.slot, consistent_point)
        self.status.enter(SNAPSHOT, f"slot {self.slot} created at {consistent_point}")
        consistent = lsn_from_str(consistent_point)
        rows = 0
        with pg.connect(self.settings) as snap_conn:
            for record in snapshot_records(snap_conn, snapshot_name,
                                           self.settings.cdc_publication, consistent,
                                           self.options, self.clock_us):
                publisher.send(record)
                publisher.poll(0)
                self.status.pulse.beat()
                if record.value is not None:
                    rows += 1
                    metrics.EVENTS.labels(record.topic.rsplit(".", 1)[-1], "r").inc()
        with self.status.pulse.pausing(301, "flushing the snapshot to Kafka"):
            publisher.flush(timeout=300)
        slot.record_snapshot_completed(conn, self.slot, rows)
        log.info("snapshot of %d rows complete at %s; streaming", rows, consistent_point)
        return consistent

    def _stream(self, cur: ReplicationCursor, conn: psycopg.Connection, publisher: KafkaPublisher,
                start_lsn: int) -> None:
        try:
            cur.start_replication(
                slot_name=self.slot, decode=False, start_lsn=start_lsn,
                options={"proto_version": "1",
                         "publication_names": self.settings.cdc_publication},
                # psycopg2 takes seconds as a float; types-psycopg2 declares an int.
                status_interval=self.settings.cdc_feedback_interval_s)  # type: ignore[arg-type]
        except psycopg2.errors.ObjectInUse as exc:
            raise slot.SlotInUse(f"replication slot {self.slot!r} is in use: another relay is "
                                 f"running; refusing to start a second one") from exc
        frontier = AckFrontier(start_lsn)
        streamer = ChangeStreamer(
            publisher, frontier, lambda rel: catalog.table_from_relation(conn, rel),
            self.options, self.clock_us, emit_truncate=self.settings.cdc_emit_truncate)
        log.info("streaming slot %s from %s", self.slot, lsn_to_str(start_lsn))
        self.status.enter(STREAMING, f"slot {self.slot} from {lsn_to_str(start_lsn)}")
        heartbeat = heartbeat_topic(self.settings.topic_prefix)
        now = time.monotonic()
        next_feedback = now + self.settings.cdc_feedback_interval_s
        next_heartbeat = now + self.settings.cdc_heartbeat_interval_s
        next_lag = now
        while not self.stop.is_set():
            self.status.pulse.beat()
            msg = cur.read_message()
            if msg is not None:
                streamer.on_payload(msg.data_start, msg.payload)
            else:
                select.select([cur], [], [], IDLE_WAIT_S)
            publisher.poll(0)
            self._retire(frontier)
            now = time.monotonic()
            if now >= next_feedback:
                self._confirm(cur, frontier)
                next_feedback = now + self.settings.cdc_feedback_interval_s
            if now >= next_heartbeat:
                publisher.send(heartbeat_record(heartbeat, self.options, self.clock_us()))
                metrics.HEARTBEATS.inc()
                next_heartbeat = now + self.settings.cdc_heartbeat_interval_s
            if now >= next_lag:
                self._refresh_lag(conn)
                next_lag = now + LAG_REFRESH_S
        # Graceful stop: let Kafka acknowledge what is in flight, then confirm it.
        with self.status.pulse.pausing(31, "flushing to Kafka"):
            publisher.flush(timeout=30)
        self._confirm(cur, frontier)

    def _confirm(self, cur: ReplicationCursor, frontier: AckFrontier) -> None:
        """Tell Postgres how far everything is acknowledged by Kafka."""
        now_us = self.clock_us()
        self._retire(frontier)
        if frontier.is_idle:
            # Nothing open: every byte up to the server's last report is handled. This
            # is what moves the slot while the captured tables are quiet.
            frontier.idle_at(cur.wal_end)
        confirmed = frontier.confirmed
        if confirmed:
            cur.send_feedback(write_lsn=confirmed, flush_lsn=confirmed, apply_lsn=confirmed,
                              force=True)
        metrics.LAST_ACKED_LSN.set(confirmed)
        oldest = frontier.oldest_unconfirmed_commit_us()
        metrics.SLOT_LAG_SECONDS.set(0 if oldest is None else max(0, now_us - oldest) / 1e6)

    def _retire(self, frontier: AckFrontier) -> None:
        retired = frontier.advance()
        if retired:
            now_us = self.clock_us()
            for tx in retired:
                metrics.COMMIT_TO_ACK.observe(max(0, now_us - tx.commit_ts_us) / 1e6)

    def _refresh_lag(self, conn: psycopg.Connection) -> None:
        lag = slot.lag(conn, self.slot)
        if lag is not None:
            metrics.SLOT_LAG_BYTES.set(max(0, lag[0]))
