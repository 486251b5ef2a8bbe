"""Prometheus metrics of the relay, served on settings.cdc_metrics_port at /metrics."""
from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

EVENTS = Counter("cdc_events", "Change records produced to Kafka", ["table", "op"])
TRUNCATES_SKIPPED = Counter("cdc_truncates_skipped", "TRUNCATEs not emitted (Debezium default)")
ERRORS = Counter("cdc_errors", "Relay errors, by kind", ["kind"])
HEARTBEATS = Counter("cdc_heartbeats", "Heartbeat records produced")
SLOT_LAG_BYTES = Gauge("cdc_slot_lag_bytes", "WAL held back by the slot: current LSN minus "
                       "confirmed flush LSN")
SLOT_LAG_SECONDS = Gauge("cdc_slot_lag_seconds", "Age of the oldest received commit not yet "
                         "acknowledged by Kafka (0 when caught up)")
LAST_ACKED_LSN = Gauge("cdc_last_acked_lsn", "Highest WAL position acknowledged end to end")
COMMIT_TO_ACK = Histogram("cdc_commit_to_ack_seconds", "Postgres commit to Kafka ack of the "
                          "whole transaction",
                          buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
