"""``WriteCoalescer``: single-row writes from concurrent callers leave as shared batches.

A fan-out worker applies many posts at once (``fanout_max_in_flight`` keys of a batch),
and each post writes a handful of single rows (its copy, its rank key, its timeline row,
the fanned-out mark) beside its inbox rows. One request per row costs the worker (the
driver's request path) and the node (a request's parsing, dispatch and response) far
more than the row itself: the best raw writer of the full benchmark wrote 4,848 rows/s
one row a request and 51,169 in replica-grouped batches of 50, on the same node
(bench/results/2026-12-02-polyglot-full). Here each
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
import struct
from typing import TYPE_CHECKING, Any, Iterable, Sequence, TypeAlias

from cassandra.query import BatchStatement, BatchType, BoundStatement, PreparedStatement
from prometheus_client import Counter

from .cql_async import CqlRunner, replica_group

if TYPE_CHECKING:
    from cassandra.pool import Host

# Rows per batch by default (the fan-out's inbox rows use fanout_batch_rows, 200), under
# the stack's unlogged_batch_across_partitions_warn_threshold (256, deploy/stack/cassandra.py).
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
    """Rows waiting to leave together, and the one outcome every caller of them awaits.
    A row is its query id, its serialized values and its routing key; ``lone`` keeps the
    bound statement of a group's first row, sent as itself if no other row joins it."""

    __slots__ = ("rows", "lone", "size", "timer", "done")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.rows: list[tuple[bytes, list[Any], bytes | None]] = []
        self.lone: BoundStatement | None = None
        self.size = 0
        self.timer: asyncio.TimerHandle | None = None
        self.done: asyncio.Future[None] = loop.create_future()


Row: TypeAlias = tuple[PreparedStatement, Sequence[Any]]
_BIGINT = struct.Struct(">q")
# The driver's list of a batch's (prepared?, query id, values), which a batch is built
# from here (cassandra-driver 3.x; private): rows are kept serialized, so ``write_keyed``
# can skip ``bind``. A driver without it gets no coalescer (``SUPPORTED``; the fan-out
# then sends each statement on its own).
SUPPORTED = isinstance(getattr(BatchStatement(), "_statements_and_parameters", None), list)


def _keyed(statement: PreparedStatement) -> bool:
    """Whether the statement's partition key is exactly its first bind marker, a bigint."""
    metadata = statement.column_metadata or []
    return (bool(metadata) and list(statement.routing_key_indexes or []) == [0]
            and getattr(metadata[0].type, "typename", None) == "bigint")


class WriteCoalescer:
    def __init__(self, runner: CqlRunner, *, max_rows: int = MAX_ROWS, max_bytes: int = MAX_BYTES,
                 linger_s: float = LINGER_S, max_in_flight: int = 16) -> None:
        if not SUPPORTED:
            raise RuntimeError("this cassandra-driver's BatchStatement has no _statements_and_parameters")
        self._run = runner
        self._max_rows = max(1, max_rows)
        self._max_bytes = max_bytes
        self._linger_s = max(0.0, linger_s)
        self._max_in_flight = max(1, max_in_flight)
        self._permits: asyncio.Semaphore | None = None  # made on the worker's loop
        self._groups: dict[frozenset[Host] | None, _Group] = {}
        self._refused: dict[bytes, bool] = {}  # query id -> not batchable
        self._keyed: dict[bytes, bool] = {}    # query id -> write_keyed may skip bind
        self._sending: set[asyncio.Task[None]] = set()  # the loop keeps only weak references
        self.batches = 0  # batches sent (the tests and the bench read these)
        self.rows = 0     # rows sent in them

    async def write(self, statement: PreparedStatement, params: Sequence[Any]) -> None:
        """Store one row; returns once the batch that carried it is applied."""
        self._check(statement)
        bound = statement.bind(params)
        await asyncio.shield(self._add(statement.query_id, bound.values, bound.routing_key, bound,
                                       _size(bound.values)))

    async def write_all(self, rows: Iterable[Row]) -> int:
        """Store several rows (they may join different batches); returns how many. The
        first error raises once every batch they joined has finished."""
        outcomes: set[asyncio.Future[None]] = set()  # one per batch joined
        count = 0
        for statement, params in rows:
            self._check(statement)
            bound = statement.bind(params)
            outcomes.add(self._add(statement.query_id, bound.values, bound.routing_key, bound,
                                   _size(bound.values)))
            count += 1
        await _settled(outcomes)
        return count

    async def write_keyed(self, statement: PreparedStatement, keys: Iterable[int],
                          rest: Sequence[Any]) -> int:
        """Rows of one statement that differ only in their first value, the partition key
        (a post's row in each reader's inbox): ``rest`` is serialized once, and each key
        costs a struct pack instead of a ``bind`` of every value (py-spy: binding was
        ~18 % of the fan-out's loop thread, ~4 µs a row against 0.15 µs). Returns how many
        rows; a statement of another shape is bound row by row (``write_all``)."""
        if not self._keyed_shape(statement):
            return await self.write_all((statement, (key, *rest)) for key in keys)
        query_id = statement.query_id
        consts = statement.bind((0, *rest)).values[1:]  # the driver's type checks, once
        size = _BIGINT.size + _size(consts)  # every row's: only the key differs
        pack = _BIGINT.pack
        outcomes: set[asyncio.Future[None]] = set()  # one per batch joined
        count = 0
        for key in keys:
            packed = pack(key)
            outcomes.add(self._add(query_id, [packed, *consts], packed, None, size))
            count += 1
        await _settled(outcomes)
        return count

    async def write_keyed_rows(self, statement: PreparedStatement,
                               rows: Iterable[tuple[int, Sequence[Any]]]) -> int:
        """Rows of one statement as ``(key, rest)``: ``write_keyed`` for rows of several
        ``rest`` values (several posts' rows), each distinct ``rest`` object serialized
        once. Rows join batches in the order given, so rows given grouped by key (a
        reader's rows of several posts) share a batch: one partition mutation on the
        node instead of one per row. Returns how many rows."""
        if not self._keyed_shape(statement):
            return await self.write_all((statement, (key, *rest)) for key, rest in rows)
        query_id = statement.query_id
        # id(rest) -> its values, a row's size, and rest itself (held, so no other object
        # takes its id while the rows are read)
        serialized: dict[int, tuple[list[Any], int, Sequence[Any]]] = {}
        pack = _BIGINT.pack
        session, join = self._run.session, self._join
        outcomes: set[asyncio.Future[None]] = set()  # one per batch joined
        count = 0
        # A key's rows given together share its packed key and replicas, found once for
        # the run (a reader's rows of a push round: replica_group was ~30 % of this
        # loop's own time when it ran once a row, cProfile).
        last: int | None = None
        packed, where = b"", None
        for key, rest in rows:
            known = serialized.get(id(rest))
            if known is None:
                consts = statement.bind((0, *rest)).values[1:]  # the driver's type checks, once
                known = serialized[id(rest)] = (consts, _BIGINT.size + _size(consts), rest)
            if key != last:
                last, packed = key, pack(key)
                where = replica_group(session, packed)
            outcomes.add(join(where, query_id, [packed, *known[0]], packed, None, known[1]))
            count += 1
        await _settled(outcomes)
        return count

    def _keyed_shape(self, statement: PreparedStatement) -> bool:
        """``_check``, then whether rows of ``statement`` may be written by their key alone
        (its first value a bigint partition key: ``_keyed``), decided once a statement."""
        self._check(statement)
        keyed = self._keyed.get(statement.query_id)
        if keyed is None:
            keyed = self._keyed[statement.query_id] = _keyed(statement)
        return keyed

    def _check(self, statement: PreparedStatement) -> None:
        refused = self._refused.get(statement.query_id)
        if refused is None:
            refused = self._refused[statement.query_id] = _refused(statement)
        if refused:
            raise ValueError(f"not batchable across partitions: {statement.query_string!r}")

    def _add(self, query_id: bytes, values: list[Any], routing_key: bytes | None,
             bound: BoundStatement | None, size: int) -> asyncio.Future[None]:
        """Put the row (``size`` serialized bytes) in its replicas' group; the future of
        the batch it will leave in."""
        return self._join(replica_group(self._run.session, routing_key), query_id, values,
                          routing_key, bound, size)

    def _join(self, key: frozenset[Host] | None, query_id: bytes, values: list[Any],
              routing_key: bytes | None, bound: BoundStatement | None, size: int
              ) -> asyncio.Future[None]:
        """``_add`` for a row whose replicas' group (``replica_group``) is ``key``."""
        group = self._groups.get(key)
        if group is not None and group.size + size > self._max_bytes:
            self._flush(key)
            group = None
        if group is None:
            loop = asyncio.get_running_loop()
            group = self._groups[key] = _Group(loop)
            group.timer = loop.call_later(self._linger_s, self._flush, key)
            group.lone = bound
        group.rows.append((query_id, values, routing_key))
        group.size += size
        done = group.done
        if len(group.rows) >= self._max_rows or group.size >= self._max_bytes:
            self._flush(key)
        return done

    def _flush(self, key: frozenset[Host] | None) -> None:
        group = self._groups.pop(key, None)
        if group is None:
            return
        if group.timer is not None:
            group.timer.cancel()
        statement: Any
        if len(group.rows) == 1 and group.lone is not None:
            statement = group.lone  # a lone row goes as itself, not a batch of one
        else:  # token-aware routing: to a replica of the first row
            statement = serialized_batch([(q, v) for q, v, _ in group.rows], group.rows[0][2],
                                         self._run.session.keyspace)
        self.batches += 1
        self.rows += len(group.rows)
        BATCHES.inc()
        ROWS.inc(len(group.rows))
        if self._permits is None:
            self._permits = asyncio.Semaphore(self._max_in_flight)
        task = asyncio.ensure_future(self._send(statement, self._permits))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)
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


def serialized_batch(rows: Sequence[tuple[bytes, list[Any]]], routing_key: bytes | None,
                     keyspace: str | None) -> BatchStatement:
    """An unlogged batch of rows kept serialized, ``(query id, values)``, built without
    ``bind`` (the driver's private list, ``SUPPORTED``), routed to a replica of
    ``routing_key`` (None: any node). The coalescer's batches, and the benchmark's raw
    writers' (bench/fanout/raw_writer.py), so the baseline serializes as cheaply as the fan-out."""
    batch = BatchStatement(batch_type=BatchType.UNLOGGED)
    batch._statements_and_parameters = [(True, q, v) for q, v in rows]
    if routing_key is not None:
        batch.routing_key = routing_key
        batch.keyspace = keyspace
    return batch


def _size(values: Sequence[Any]) -> int:
    """Serialized bytes of a row's bound values (None is null, UNSET_VALUE is nothing)."""
    return sum(len(v) for v in values if isinstance(v, (bytes, bytearray)))


async def _settled(outcomes: Iterable[asyncio.Future[None]]) -> None:
    """Wait for every batch; then raise the first error among them."""
    futures = list(outcomes)
    if not futures:
        return
    results = await asyncio.gather(*(asyncio.shield(f) for f in futures), return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
