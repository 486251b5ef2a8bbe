"""``<prefix>.follow-counts`` and ``<prefix>.like-counts``: edge changes keyed by what they count.

Contract: ``schemas/{follow,like}-counts.{key,value}.v1.json``. The fan-out re-publishes
every follows change keyed by the followed author, the ranker every likes change keyed by
the post: repartition topics, as Kafka Streams makes them, so that all changes of one
count reach ONE consumer, which writes the count without a Paxos round
(services/shared/domain/owned_counts.py). A record is the change itself, not a delta: a
record published twice (a producer that replays its source after a crash) is read back
by its edge's LSN and counts once. Parse and build live here, together.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from services.shared.domain.edge_transitions import EdgeChange

from .envelope import MalformedEnvelope, id_string, json_object


@dataclass(frozen=True)
class EdgeCounted:
    """``edge`` (a follower, a liker) of ``counted`` (an author, a post) set to ``active``
    by the source change at ``lsn``."""

    counted: int
    edge: int
    active: bool
    lsn: int

    @property
    def change(self) -> EdgeChange:
        return EdgeChange(self.edge, self.active, self.lsn)


def encode(record: EdgeCounted) -> tuple[bytes, bytes]:
    """(key, value): the key is the counted id, so one count is one partition."""
    value = {"counted_id": str(record.counted), "edge_id": str(record.edge),
             "active": record.active, "lsn": record.lsn}
    return json.dumps(str(record.counted)).encode(), json.dumps(value, separators=(",", ":")).encode()


def parse(raw_value: bytes | str | None) -> EdgeCounted | None:
    """One record; ``None`` for a null value. Raises ``MalformedEnvelope``."""
    value = json_object(raw_value, "edge-counts value")
    if value is None:
        return None
    active, lsn = value.get("active"), value.get("lsn")
    if not isinstance(active, bool):
        raise MalformedEnvelope(f"active must be a boolean, got {active!r}")
    if isinstance(lsn, bool) or not isinstance(lsn, int) or not 0 < lsn < 1 << 63:
        raise MalformedEnvelope(f"lsn must be a positive 64-bit integer, got {lsn!r}")
    return EdgeCounted(id_string(value, "counted_id"), id_string(value, "edge_id"), active, lsn)
