"""Is the pipeline still getting through its backlog? What `make run`'s demo waits on.

``ProgressWatch`` (pure) decides from successive readings of the workers' offsets: the
events applied (committed offsets, summed) and the events arrived (log ends, summed).
Progress is either moving: workers committing, or the CDC relay still delivering the
backlog into Kafka. The wait gives up only after ``stall_s`` without any of it, instead
of after a fixed time: on three nodes the demo's backlog takes minutes longer than on
one, and a fixed deadline failed a pipeline that was draining.

``PipelineOffsets`` reads those sums for the fan-out's and the ranker's groups with
plain consumers of each group that never subscribe: ``committed()`` asks the group's
coordinator without joining it, and the log ends come from the partitions' watermarks.
Not the admin client's ListConsumerGroupOffsets, which crashed librdkafka when the
coordinator moved (deploy/lag.py ``committed_offsets``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from services.shared.contracts.topics import (cdc_topic, follow_counts_topic, like_counts_topic,
                                              rank_features_topic, rank_moves_topic,
                                              reader_events_topic)
from services.shared.settings import Settings


@dataclass(frozen=True)
class Offsets:
    """One reading: events applied (committed) and arrived (log end), over every
    partition of the workers' topics."""

    applied: int
    arrived: int

    @property
    def lag(self) -> int:
        return max(0, self.arrived - self.applied)


@dataclass(frozen=True)
class Progress:
    """What a reading says: the lag, events applied a second since the previous
    reading (None for the first), and how long nothing has moved."""

    lag: int
    applied_per_s: float | None
    still_for_s: float


class ProgressWatch:
    """Successive readings (``observe``) and whether the pipeline has stalled: nothing
    moved for ``stall_s`` since ``started_at`` or the last reading that moved (a reading
    that failed, Kafka not answering, is no progress either)."""

    def __init__(self, stall_s: float, started_at: float) -> None:
        self.stall_s = stall_s
        self._last: Offsets | None = None
        self._last_at = started_at
        self._moved_at = started_at

    def observe(self, now: float, offsets: Offsets) -> Progress:
        rate: float | None = None
        if self._last is not None:
            if offsets.applied > self._last.applied or offsets.arrived > self._last.arrived:
                self._moved_at = now
            if now > self._last_at:
                rate = max(0, offsets.applied - self._last.applied) / (now - self._last_at)
        self._last, self._last_at = offsets, now
        return Progress(offsets.lag, rate, now - self._moved_at)

    def stalled(self, now: float) -> bool:
        return now - self._moved_at >= self.stall_s


def worker_topics(settings: Settings) -> dict[str, list[str]]:
    """Each worker group and the topics it consumes (services/fanout/app.py,
    services/ranker/app.py)."""
    prefix = settings.topic_prefix
    return {
        settings.fanout_group_id or f"{prefix}.fanout":
            [cdc_topic(t, prefix) for t in ("posts", "follows", "blocks", "mutes", "users")]
            + [rank_moves_topic(prefix), reader_events_topic(prefix), follow_counts_topic(prefix)],
        settings.ranker_group_id or f"{prefix}.ranker":
            [cdc_topic("likes", prefix), rank_features_topic(prefix), like_counts_topic(prefix)],
    }


class PipelineOffsets:
    """Reads ``Offsets`` for the worker groups; one consumer per group, kept open."""

    def __init__(self, settings: Settings, timeout_s: float = 10.0) -> None:
        from services.shared.clients import kafka

        self._settings = settings
        self._timeout_s = timeout_s
        self._groups = worker_topics(settings)
        self._consumers: dict[str, Any] = {
            group: kafka.consumer(settings, {"group.id": group, "enable.auto.commit": False})
            for group in self._groups}

    def read(self) -> Offsets:
        from confluent_kafka import TopicPartition

        applied = arrived = 0
        for group, topics in self._groups.items():
            consumer = self._consumers[group]
            meta = consumer.list_topics(timeout=self._timeout_s)
            partitions = [TopicPartition(t, p) for t in topics if t in meta.topics
                          for p in meta.topics[t].partitions]
            if not partitions:
                continue
            committed = {(tp.topic, tp.partition): tp.offset
                         for tp in consumer.committed(partitions, timeout=self._timeout_s)}
            for tp in partitions:
                low, high = consumer.get_watermark_offsets(tp, timeout=self._timeout_s)
                done = committed.get((tp.topic, tp.partition), -1)
                # A partition never committed counts from its log start (deploy/lag.py group_lag).
                applied += done - low if done >= 0 else 0
                arrived += high - low
        return Offsets(applied, arrived)

    def close(self) -> None:
        for consumer in self._consumers.values():
            consumer.close()
