"""What both contract suites use: ids and times built as the real code builds them, and
a sink that records the serving-changes notices a store sends.

Users are random 62-bit ids and posts Snowflake ids (services/shared/domain/ids.py) on a random
node, so runs never share a partition (the Cassandra tables are shared by the session).
Posts are made on a fixed day (``BASE``), whatever the machine's clock: their day
buckets are then known, and no store under contract reads the clock. Times are whole
milliseconds, what a Cassandra ``timestamp`` keeps; write timestamps are µs.
"""
from __future__ import annotations

import itertools
import secrets
from datetime import datetime, timedelta, timezone
from typing import Any, Awaitable, Callable

from services.shared.contracts.serving_changes import ServingChange
from services.shared.domain import ids
from tests.support.memory_stores import to_ms

BASE = datetime(2026, 6, 1, 12, 0, tzinfo=timezone.utc)
DAY = timedelta(days=1)
_SEQ = itertools.count(1)


def new_user_id() -> int:
    return secrets.randbelow(1 << 62) + 1


def new_post_id(at: datetime = BASE) -> int:
    return ids.compose(to_ms(at), secrets.randbelow(ids.MAX_NODE + 1), next(_SEQ) & ids.MAX_SEQUENCE)


def us(at: datetime) -> int:
    """A write timestamp (µs) at ``at``: the fan-out writes a post's rows at its time."""
    return to_ms(at) * 1000


# How a subject runs a store's coroutine to its end (on the subject's own event loop).
Run = Callable[[Awaitable[Any]], Any]


class RecordedChanges:
    """A ``ChangeSink`` that keeps every notice it is told, in order."""

    def __init__(self) -> None:
        self.changes: list[ServingChange] = []

    async def changed(self, change: ServingChange) -> None:
        self.changes.append(change)
