"""Debezium-format CDC events built by hand: what the relay would produce, for driving a
worker without Postgres or the relay (the fan-out benchmarks, and the tests' workers).

``CdcEvents`` hands out increasing LSNs (the write timestamps of every effect), renders
rows like Debezium 3.6's JSON converter without schemas (bigint as numbers, timestamptz
as ISO-8601 UTC strings, jsonb as JSON strings), keys as the primary key object, and a
tombstone after each delete. ``send`` produces them to ``<prefix>.public.<table>``.
"""
from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Iterable

from services.shared.contracts.topics import cdc_topic
from services.shared.domain import ids
from services.shared.clients import kafka
from services.shared.domain.rules import VISIBLE
from services.shared.settings import KafkaSettings

_LSN = itertools.count(24_000_000, 8)  # process-wide, so every builder's LSNs increase


@dataclass(frozen=True)
class CdcMessage:
    topic: str
    key: bytes
    value: bytes | None


def iso(ts: datetime) -> str:
    return ts.astimezone(timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


def post_id_at(ts: datetime, seq: int) -> int:
    """A Snowflake id for a post created at ``ts`` (node 1, sequence ``seq``)."""
    return ids.lowest_id_at(int(ts.timestamp() * 1000)) | (1 << ids.NODE_SHIFT) | (seq & ids.MAX_SEQUENCE)


class CdcEvents:
    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def next_lsn(self) -> int:
        return next(_LSN)

    def _envelope(self, table: str, op: str, before: dict | None, after: dict | None,
                  key: dict, lsn: int | None = None) -> list[CdcMessage]:
        lsn = self.next_lsn() if lsn is None else lsn
        now_ms = int(datetime.now(timezone.utc).timestamp() * 1000)
        value = {
            "before": before, "after": after, "op": op, "ts_ms": now_ms, "transaction": None,
            "source": {"version": "3.6.1.Final", "connector": "postgresql", "name": self.prefix,
                       "ts_ms": now_ms, "snapshot": "true" if op == "r" else "false",
                       "db": "feed", "sequence": json.dumps([None, str(lsn)]), "schema": "public",
                       "table": table, "txId": lsn // 8, "lsn": lsn, "xmin": None},
        }
        topic = cdc_topic(table, self.prefix)
        k = json.dumps(key, separators=(",", ":")).encode()
        out = [CdcMessage(topic, k, json.dumps(value, separators=(",", ":")).encode())]
        if op == "d":
            out.append(CdcMessage(topic, k, None))
        return out

    # -- posts -------------------------------------------------------------------------
    @staticmethod
    def post_row(post_id: int, author_id: int, created_at: datetime, *, text: str = "hello",
                 visibility: int = VISIBLE, deleted_at: datetime | None = None,
                 media: tuple[str, ...] = ()) -> dict[str, Any]:
        return {"post_id": post_id, "author_id": author_id, "created_at": iso(created_at),
                "text": text, "media_ids": json.dumps(list(media)), "rank_features": "{}",
                "visibility": visibility, "deleted_at": iso(deleted_at) if deleted_at else None}

    def post_created(self, row: dict, *, op: str = "c") -> list[CdcMessage]:
        return self._envelope("posts", op, None, row, {"post_id": row["post_id"]})

    def post_deleted(self, row: dict) -> list[CdcMessage]:
        return self._envelope("posts", "d", row, None, {"post_id": row["post_id"]})

    def post_updated(self, before: dict, after: dict) -> list[CdcMessage]:
        """An edit, a moderation removal (visibility 0) or a restore (1 again)."""
        return self._envelope("posts", "u", before, after, {"post_id": after["post_id"]})

    # -- users ---------------------------------------------------------------------------
    @staticmethod
    def user_row(user_id: int, created_at: datetime, *, handle: str | None = None,
                 display_name: str | None = None) -> dict[str, Any]:
        return {"user_id": user_id, "created_at": iso(created_at), "handle": handle,
                "display_name": display_name}

    def user_created(self, row: dict) -> list[CdcMessage]:
        return self._envelope("users", "c", None, row, {"user_id": row["user_id"]})

    def user_updated(self, before: dict, after: dict) -> list[CdcMessage]:
        """A profile change (PUT /v1/me/profile): the row before and after."""
        return self._envelope("users", "u", before, after, {"user_id": after["user_id"]})

    # -- follows / blocks / likes ------------------------------------------------------------
    def _edge(self, table: str, op: str, row: dict, *key: str) -> list[CdcMessage]:
        """An insert (``c``) or delete (``d``) of an edge row, keyed by its ``key`` columns."""
        before, after = (None, row) if op == "c" else (row, None)
        return self._envelope(table, op, before, after, {k: row[k] for k in key})

    def _follow_row(self, follower: int, followed: int, since: datetime) -> dict:
        return {"follower_id": follower, "followed_id": followed, "following_since": iso(since)}

    def followed(self, follower: int, followed: int, since: datetime) -> list[CdcMessage]:
        return self._edge("follows", "c", self._follow_row(follower, followed, since),
                          "follower_id", "followed_id")

    def unfollowed(self, follower: int, followed: int, since: datetime) -> list[CdcMessage]:
        return self._edge("follows", "d", self._follow_row(follower, followed, since),
                          "follower_id", "followed_id")

    def blocked(self, blocker: int, blocked: int, at: datetime) -> list[CdcMessage]:
        row = {"blocker_id": blocker, "blocked_id": blocked, "created_at": iso(at)}
        return self._edge("blocks", "c", row, "blocker_id", "blocked_id")

    def muted(self, muter: int, muted: int, at: datetime) -> list[CdcMessage]:
        row = {"muter_id": muter, "muted_id": muted, "created_at": iso(at)}
        return self._edge("mutes", "c", row, "muter_id", "muted_id")

    def unmuted(self, muter: int, muted: int, at: datetime) -> list[CdcMessage]:
        row = {"muter_id": muter, "muted_id": muted, "created_at": iso(at)}
        return self._edge("mutes", "d", row, "muter_id", "muted_id")

    def liked(self, post_id: int, user_id: int, at: datetime) -> list[CdcMessage]:
        row = {"post_id": post_id, "user_id": user_id, "created_at": iso(at)}
        return self._edge("likes", "c", row, "post_id", "user_id")

    def unliked(self, post_id: int, user_id: int, at: datetime) -> list[CdcMessage]:
        row = {"post_id": post_id, "user_id": user_id, "created_at": iso(at)}
        return self._edge("likes", "d", row, "post_id", "user_id")

    def account_changed(self, user_id: int, state: str | None, at: datetime) -> list[CdcMessage]:
        """An account suspended or deleted (``state``; an insert), or unsuspended (None:
        the row's delete)."""
        row = {"user_id": user_id, "state": state or "suspended", "reason": "",
               "moderator_id": None, "changed_at": iso(at)}
        return self._edge("account_states", "d" if state is None else "c", row, "user_id")


def send(settings: KafkaSettings, messages: Iterable[CdcMessage]) -> int:
    """Produce messages (keyed, murmur2 like the Java client) and wait for every ack."""
    producer = kafka.producer(settings, {"partitioner": "murmur2_random",
                                         "enable.idempotence": True, "linger.ms": 5})
    n = 0
    for m in messages:
        producer.produce(m.topic, key=m.key, value=m.value)
        n += 1
        if n % 1000 == 0:
            producer.poll(0)
    remaining = producer.flush(30)
    assert remaining == 0, f"{remaining} CDC messages not delivered"
    return n
