"""A ``CqlRunner`` for bulk seeding: single-row writes from many concurrent store calls
leave as unlogged batches.

The seed writes through the fan-out's own stores (``CopyStore``, ``InboxStore``), one
statement per call. On this shared 2-core machine that is ~1,200 requests/s, while the
same rows in unlogged batches go at ~24,000 rows/s (measured in the same minute): the
cost is per request, in the driver and the node, not per row. This runner keeps the
store calls as they are and coalesces what they execute:

* a single prepared write waits at most ``LINGER_S`` for others and goes out in one
  unlogged batch of up to ``BATCH_ROWS`` rows / ``BATCH_BYTES`` (its caller resumes
  when the batch is applied; an error fails every caller of that batch);
* reads (``SELECT``), and batches a store built itself, go out as they are.

For a bulk load only: batches across partitions are right on one node (the seed's
stack) and still correct on several (the coordinator forwards each row).
"""
from __future__ import annotations

import asyncio
from typing import Any, Sequence

from cassandra.cluster import Session
from cassandra.query import BatchStatement, BatchType, PreparedStatement

from services.shared.stores.cql_async import CqlRunner, Executable

# Rows per batch: under the stack's cross-partition batch warning threshold (64,
# deploy/stack/cassandra.py).
BATCH_ROWS = 48
# Estimated bytes per batch: under Cassandra's batch_size_warn_threshold (5 KiB), so a
# bulk load does not log a warning per batch.
BATCH_BYTES = 4_500
# How long a lone write waits for company: far below a request's own latency here.
LINGER_S = 0.002


def _size(params: Sequence[Any]) -> int:
    """Rough serialized size of a row's values (strings by length, others 8 bytes)."""
    return 16 + sum(len(v) if isinstance(v, (str, bytes)) else 8 for v in params)


class CoalescingRunner(CqlRunner):
    def __init__(self, session: Session, max_in_flight: int) -> None:
        super().__init__(session, max_in_flight)
        self._pending: list[tuple[PreparedStatement, Sequence[Any], asyncio.Future[None]]] = []
        self._pending_bytes = 0
        self._timer: asyncio.TimerHandle | None = None
        self.batches = 0

    async def execute(self, statement: Executable, params: Sequence[Any] = ()) -> list[Any]:
        if isinstance(statement, BatchStatement) or statement.query_string.lstrip()[:6].upper() == "SELECT":
            return await super().execute(statement, params)
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        size = _size(params)
        if self._pending and self._pending_bytes + size > BATCH_BYTES:
            self._flush()
        self._pending.append((statement, params, done))
        self._pending_bytes += size
        if len(self._pending) >= BATCH_ROWS:
            self._flush()
        elif self._timer is None:
            self._timer = loop.call_later(LINGER_S, self._flush)
        await done
        return []

    def _flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        pending, self._pending, self._pending_bytes = self._pending, [], 0
        if not pending:
            return
        batch = BatchStatement(batch_type=BatchType.UNLOGGED)
        for statement, params, _ in pending:
            batch.add(statement, params)
        self.batches += 1
        task = asyncio.ensure_future(CqlRunner.execute(self, batch))

        def settle(t: asyncio.Future[list[Any]]) -> None:
            error = asyncio.CancelledError() if t.cancelled() else t.exception()
            for _, _, fut in pending:
                if not fut.done():
                    fut.set_exception(error) if error else fut.set_result(None)
        task.add_done_callback(settle)
