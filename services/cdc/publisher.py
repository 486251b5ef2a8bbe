"""Kafka side of the relay: an idempotent, acks=all producer with per-record callbacks."""
from __future__ import annotations

import json
from typing import Callable, TextIO

from confluent_kafka import KafkaError, Message

from services.shared.clients import kafka
from services.shared.settings import CdcProcess
from services.shared.stores.store_health import record_kafka_stats

from .envelope import OutRecord


class DeliveryFailed(RuntimeError):
    """Kafka gave up on a record; the relay must not confirm past it."""


# A delivery report without an error but without an offset either: librdkafka's
# idempotent producer "implicitly acks" messages of a failed request when a later request
# of the same partition succeeds (rd_kafka_dr_implicit_ack, librdkafka src/rdkafka_broker.c),
# reporting them delivered with no offset. Around a leader move that guess can be wrong:
# confluentinc/confluent-kafka-go#921 (a restarted producer, a preferred-leader election,
# the first records never written), and docs/reliability.md's lost follow looks the same.
# The relay treats such a report as a failure: it restarts from its slot and sends the
# transaction again (a duplicate at worst, which every consumer absorbs by LSN).
NO_OFFSET = "acknowledged without an offset (implicit ack): persistence not confirmed"


def producer_config(settings: CdcProcess) -> dict[str, object]:
    """The relay producer's whole configuration: the connection (brokers, SASL, TLS) from
    ``clients.kafka.librdkafka_config``, then the relay's own options."""
    return {**kafka.librdkafka_config(settings), **_options(settings)}


def _options(settings: CdcProcess) -> dict[str, object]:
    return {
        # No duplicates or reordering from producer retries; per-partition order kept.
        "enable.idempotence": True,
        "acks": "all",
        # Java's default partitioner for keyed records: a key lands on the partition
        # Debezium (Kafka Connect) would choose, so both can feed the same topics.
        "partitioner": "murmur2_random",
        # Up to 5 ms of batching: raises throughput under bursts, small next to the
        # freshness target (1.5 s commit-to-feed).
        "linger.ms": 5,
        "compression.type": "lz4",
        # A broker that stops answering (cut off, not down) is given up on this fast,
        # not after librdkafka's 30 s / 60 s (Settings.kafka_request_timeout_s).
        "request.timeout.ms": settings.kafka_request_timeout_ms,
        "socket.timeout.ms": settings.kafka_request_timeout_ms,
        "client.id": "feed-cdc-relay",
        # Broker states every 5 s into feed_kafka_brokers (store_health.py; served by poll).
        "statistics.interval.ms": 5000,
        "stats_cb": record_kafka_stats,
    }


class KafkaPublisher:
    """Thin adapter over confluent-kafka; ``on_ack`` runs inside ``poll``/``flush``."""

    def __init__(self, settings: CdcProcess, on_wait: Callable[[], None] | None = None) -> None:
        self._producer = kafka.producer(settings, _options(settings))
        # Called on each turn of a wait for room in the local queue (the relay's pulse:
        # waiting for Kafka is not a stalled loop).
        self._on_wait = on_wait
        self._failure: str | None = None
        # CdcSettings.cdc_delivery_trace: line-buffered, so a SIGKILL loses at most a line.
        self._trace: TextIO | None = (open(settings.cdc_delivery_trace, "a", buffering=1)
                                      if settings.cdc_delivery_trace else None)

    def send(self, record: OutRecord, on_ack: Callable[[], None] | None = None,
             source: tuple[int, int] | None = None) -> None:
        """Produce ``record``; ``on_ack`` runs when Kafka acknowledged it. ``source``
        (xid, WAL position) only labels the record in the delivery trace."""
        def delivered(err: KafkaError | None, msg: Message) -> None:
            problem = str(err) if err is not None else None
            offset = msg.offset()
            if problem is None and (offset is None or offset < 0):
                problem = NO_OFFSET
            if self._trace is not None:
                self._trace.write(json.dumps({
                    "xid": source[0] if source else None, "lsn": source[1] if source else None,
                    "topic": record.topic, "partition": msg.partition(), "offset": msg.offset(),
                    "error": problem}) + "\n")
            if problem is not None:
                self._failure = f"{record.topic}: {problem}"
            elif on_ack is not None:
                on_ack()

        while True:
            try:
                self._producer.produce(record.topic, value=record.value, key=record.key,
                                       on_delivery=delivered)
                return
            except BufferError:
                # Local queue full: serve delivery reports to make room, then retry.
                self._producer.poll(0.05)
                if self._on_wait is not None:
                    self._on_wait()
                self.raise_on_failure()

    def poll(self, timeout: float = 0.0) -> None:
        self._producer.poll(timeout)
        self.raise_on_failure()

    def flush(self, timeout: float = 60.0) -> None:
        """Wait until every record sent so far is acknowledged (or raise)."""
        remaining = self._producer.flush(timeout)
        self.raise_on_failure()
        if remaining:
            raise DeliveryFailed(f"{remaining} records not acknowledged after {timeout:.0f} s")

    def close_trace(self) -> None:
        if self._trace is not None:
            self._trace.close()
            self._trace = None

    def raise_on_failure(self) -> None:
        if self._failure is not None:
            raise DeliveryFailed(self._failure)
