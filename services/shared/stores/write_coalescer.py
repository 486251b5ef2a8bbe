"""``WriteCoalescer``: single-row writes from concurrent callers leave as shared batches.

A fan-out worker applies many posts at once (``fanout_max_in_flight`` keys of a batch),
and each post writes a handful of single rows (its copy, its rank key, its timeline row,
the fanned-out mark) beside its inbox rows. One request per row costs the worker (the
driver's request path) and the node (a request's parsing, dispatch and response) far
more than the row itself: the best raw writer of the full benchmark wrote 4,848 rows/s
one row a request and 51,169 in replica-grouped batches of 50, on the same node
(bench/results/2026-12-02-polyglot-full-s17). Here each
``write`` joins the pending rows that share its replicas, and a group leaves as one
unlogged batch when it is full (``max_rows`` or ``max_bytes``) or ``linger_s`` after its
first row, whichever is first; the caller resumes when the batch is applied, so
``await write(...)`` means what ``await runner.execute(...)`` did: the row is stored.

Why this keeps every guarantee of the single writes:

* each statement keeps its own ``USING TIMESTAMP`` (a batch without one of its own lets
  every statement carry its own), so last-write-wins between replays, deletes and late
  creates is decided exactly as before;
* an unlogged batch is applied partition by partition, like the single writes it
  replaces: nothing is promised across partitions that was not promised before, and
  rows of one partition in one batch are applied together (one mutation);
* rows are grouped by the replicas of their partition (the Spark Cassandra connector's
  ``replica_set`` grouping, as ``InboxStore`` does for a post's rows), and token-aware
  routing sends the batch to one of them, so the coordinator writes locally, not as a
  proxy;
* an error fails every caller of that batch; each caller's retry (``StoreRetry``, the
  poison guard) writes its row again, and every write here is idempotent.

Conditional (LWT) and counter statements cannot share a batch with other partitions'
rows: they are refused (``ValueError``), and go through ``CqlRunner.execute`` as before.
Batches run through the runner, so they take its process-wide permits.
"""
from __future__ import annotations

import asyncio
import re
from typing import TYPE_CHECKING, Any, Iterable, Sequence, TypeAlias

from cassandra.query import BatchStatement, BatchType, BoundStatement, PreparedStatement
from prometheus_client import Counter

from .cql_async import CqlRunner

if TYPE_CHECKING:
    from cassandra.pool import Host

# Rows per batch: the fan-out's inbox batches' size (services/fanout/inbox.py), under the
# stack's unlogged_batch_across_partitions_warn_threshold (64, deploy/stack/cassandra.py).
MAX_ROWS = 50
# Serialized bytes of a batch's values: well under Cassandra's batch_size_fail_threshold
# (50 KiB by default) and the stack's warn threshold (48 KiB); a post copy with a long
# text fills a batch early instead of failing it.
MAX_BYTES = 32 * 1024
# How long a lone row waits for company: far below a request's own latency on a busy
# node, and far below the freshness target (1.5 s).
LINGER_S = 0.001

# rows / batches = how many rows a request carries (1: no company found in the linger).
ROWS = Counter("feed_coalesced_write_rows_total", "Rows written through the write coalescer")
BATCHES = Counter("feed_coalesced_write_requests_total", "Requests (batches or lone rows) it sent")

_CONDITIONAL = re.compile(r"\bIF\b|\bUPDATE\b.*\bSET\b.*\b(\w+)\s*=\s*\1\s*[+-]", re.IGNORECASE | re.DOTALL)


def _refused(statement: PreparedStatement) -> bool:
    """Conditional writes (``IF ...``) and counter updates (``c = c + ?``): not batchable
    with other partitions' rows."""
    return bool(_CONDITIONAL.search(statement.query_string))


class _Group:
    """Rows waiting to leave together, and the one outcome every caller of them awaits."""

    __slots__ = ("bounds", "size", "timer", "done")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.bounds: list[BoundStatement] = []
        self.size = 0
        self.timer: asyncio.TimerHandle | None = None
        self.done: asyncio.Future[None] = loop.create_future()


Row: TypeAlias = tuple[PreparedStatement, Sequence[Any]]


class WriteCoalescer:
    def __init__(self, runner: CqlRunner, *, max_rows: int = MAX_ROWS, max_bytes: int = MAX_BYTES,
                 linger_s: float = LINGER_S, max_in_flight: int = 16) -> None:
        self._run = runner
        self._max_rows = max(1, max_rows)
        self._max_bytes = max_bytes
        self._linger_s = max(0.0, linger_s)
        self._max_in_flight = max(1, max_in_flight)
        self._permits: asyncio.Semaphore | None = None  # made on the worker's loop
        self._groups: dict[frozenset[Host] | None, _Group] = {}
        self._refused: dict[bytes, bool] = {}  # query id -> not batchable
        self.batches = 0  # batches sent (the tests and the bench read these)
        self.rows = 0     # rows sent in them

    async def write(self, statement: PreparedStatement, params: Sequence[Any]) -> None:
        """Store one row; returns once the batch that carried it is applied."""
        await asyncio.shield(self._add(statement, params))

    async def write_all(self, rows: Iterable[Row]) -> int:
        """Store several rows (they may join different batches); returns how many. The
        first error raises once every batch they joined has finished."""
        outcomes: dict[int, asyncio.Future[None]] = {}
        count = 0
        for statement, params in rows:
            fut = self._add(statement, params)
            outcomes.setdefault(id(fut), fut)
            count += 1
        if outcomes:
            results = await asyncio.gather(*(asyncio.shield(f) for f in outcomes.values()),
                                           return_exceptions=True)
            for result in results:
                if isinstance(result, BaseException):
                    raise result
        return count

    def _add(self, statement: PreparedStatement, params: Sequence[Any]) -> asyncio.Future[None]:
        """Put the row in its replicas' group; the future of the batch it will leave in."""
        refused = self._refused.get(statement.query_id)
        if refused is None:
            refused = self._refused[statement.query_id] = _refused(statement)
        if refused:
            raise ValueError(f"not batchable across partitions: {statement.query_string!r}")
        bound = statement.bind(params)
        size = sum(len(v) for v in bound.values if v is not None)
        key = self._replicas(bound)
        group = self._groups.get(key)
        if group is not None and group.size + size > self._max_bytes:
            self._flush(key)
            group = None
        if group is None:
            loop = asyncio.get_running_loop()
            group = self._groups[key] = _Group(loop)
            group.timer = loop.call_later(self._linger_s, self._flush, key)
        group.bounds.append(bound)
        group.size += size
        done = group.done
        if len(group.bounds) >= self._max_rows or group.size >= self._max_bytes:
            self._flush(key)
        return done

    def _replicas(self, bound: BoundStatement) -> frozenset[Host] | None:
        """The replicas of the row's partition; None when every node holds every row (one
        node) or the token map does not know (the batch then goes to any node)."""
        metadata = self._run.session.cluster.metadata
        if len(metadata.all_hosts()) <= 1 or bound.routing_key is None:
            return None
        keyspace = bound.keyspace or self._run.session.keyspace
        replicas = metadata.get_replicas(keyspace, bound.routing_key)
        return frozenset(replicas) if replicas else None

    def _flush(self, key: frozenset[Host] | None) -> None:
        group = self._groups.pop(key, None)
        if group is None:
            return
        if group.timer is not None:
            group.timer.cancel()
        if len(group.bounds) == 1:
            statement: Any = group.bounds[0]  # a lone row goes as itself, not a batch of one
        else:
            statement = BatchStatement(batch_type=BatchType.UNLOGGED)
            for bound in group.bounds:
                statement.add(bound)
        self.batches += 1
        self.rows += len(group.bounds)
        BATCHES.inc()
        ROWS.inc(len(group.bounds))
        if self._permits is None:
            self._permits = asyncio.Semaphore(self._max_in_flight)
        task = asyncio.ensure_future(self._send(statement, self._permits))
        done = group.done

        def settle(t: asyncio.Task[None]) -> None:
            if done.done():
                return
            error = asyncio.CancelledError() if t.cancelled() else t.exception()
            if error is not None:
                done.set_exception(error)
            else:
                done.set_result(None)
        task.add_done_callback(settle)

    async def _send(self, statement: Any, permits: asyncio.Semaphore) -> None:
        async with permits:
            await self._run.execute(statement)
