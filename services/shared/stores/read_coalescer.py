"""``PartitionReads``: concurrent reads of single partitions of one table leave as one
``IN`` read (the DataLoader pattern), grouped by the partitions' replicas.

A fan-out worker applies many posts at once, and every post reads a few small
partitions keyed by its id or its author's (the post's copy, the author's tier, follower
count, blocks and inactive followers, the sampled inbox heads). Alone, each is a
request: for a post of 100 followers these were 9 of its ~12 requests, and a request
costs the worker (the driver's request path) and the node (parsing, dispatch, a
response) more than reading a small partition does. Here a read waits at most
``linger_s`` for others of the same statement, and they leave as one
``SELECT ... WHERE key IN ?`` of up to ``max_keys`` keys whose partitions share their
replicas; each caller gets its own partition's rows, every page of them. (The driver
computes no routing key for an ``IN``, so the read goes to any node, which reads the
replicas at the session's consistency: on the three-node stack, RF 3, every node is a
replica of every partition; on a larger ring the grouping keeps one read's partitions on
one replica set.)

A read that waited still starts after it was asked for, so it sees every write that was
acknowledged before it was asked for, as the single read would have: nothing a caller
decides from it changes. An error fails every caller of that read (each retries, as it
would have). The same key asked twice in one linger is read once.

The statement must select the partition key (a bigint) as its first column and restrict
it with ``IN ?`` as its only bind marker besides, optionally, a trailing
``PER PARTITION LIMIT ?`` given at construction.
"""
from __future__ import annotations

import asyncio
import struct
from typing import TYPE_CHECKING, Any

from cassandra.query import PreparedStatement
from prometheus_client import Counter

from .cql_async import CqlRunner, replica_group

if TYPE_CHECKING:
    from cassandra.pool import Host

# Keys per IN read: a bound that keeps one request from reading hundreds of partitions
# on its coordinator (CopyStore.read_posts' bound too).
MAX_KEYS = 50
# How long a read waits for company: far below a request's own latency on a busy node.
LINGER_S = 0.001
_BIGINT = struct.Struct(">q")
# keys / requests per table = partitions an IN read carries (1: no company in the linger).
KEYS = Counter("feed_coalesced_read_keys_total", "Partitions read through the read coalescer", ["table"])
REQUESTS = Counter("feed_coalesced_read_requests_total", "IN reads it sent", ["table"])


class _Pending:
    __slots__ = ("keys", "timer")

    def __init__(self) -> None:
        self.keys: dict[int, asyncio.Future[list[Any]]] = {}
        self.timer: asyncio.TimerHandle | None = None


class PartitionReads:
    def __init__(self, runner: CqlRunner, statement: PreparedStatement, *,
                 extra: tuple[Any, ...] = (), max_keys: int = MAX_KEYS,
                 linger_s: float = LINGER_S) -> None:
        self._run = runner
        self._statement = statement
        self._extra = extra  # bind values after the key list (a PER PARTITION LIMIT)
        self._max_keys = max(1, max_keys)
        self._linger_s = max(0.0, linger_s)
        self._pending: dict[frozenset[Host] | None, _Pending] = {}
        table = statement.column_metadata[0].table_name if statement.column_metadata else "?"
        self._keys_metric, self._requests_metric = KEYS.labels(table), REQUESTS.labels(table)
        self._reading: set[asyncio.Task[None]] = set()  # the loop keeps only weak references
        self.requests = 0  # IN reads sent (the tests and the bench read these)
        self.keys = 0      # keys read by them

    async def rows(self, key: int) -> list[Any]:
        """Every row of partition ``key`` (the statement's columns, key first)."""
        group_key = replica_group(self._run.session, _BIGINT.pack(key))
        pending = self._pending.get(group_key)
        if pending is None:
            loop = asyncio.get_running_loop()
            pending = self._pending[group_key] = _Pending()
            pending.timer = loop.call_later(self._linger_s, self._send, group_key)
        fut = pending.keys.get(key)
        if fut is None:
            fut = pending.keys[key] = asyncio.get_running_loop().create_future()
            if len(pending.keys) >= self._max_keys:
                self._send(group_key)
        return list(await asyncio.shield(fut))

    def _send(self, group_key: frozenset[Host] | None) -> None:
        pending = self._pending.pop(group_key, None)
        if pending is None:
            return
        if pending.timer is not None:
            pending.timer.cancel()
        self.requests += 1
        self.keys += len(pending.keys)
        self._requests_metric.inc()
        self._keys_metric.inc(len(pending.keys))
        task = asyncio.ensure_future(self._read(pending.keys))
        self._reading.add(task)
        task.add_done_callback(self._reading.discard)

    async def _read(self, waiting: dict[int, asyncio.Future[list[Any]]]) -> None:
        found: dict[int, list[Any]] = {key: [] for key in waiting}
        try:
            async for page in self._run.pages(self._statement, (list(waiting), *self._extra)):
                for row in page:
                    rows = found.get(row[0])
                    if rows is not None:
                        rows.append(row)
        except BaseException as exc:  # noqa: BLE001 - every caller of this read gets it
            for fut in waiting.values():
                if not fut.done():
                    fut.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        for key, fut in waiting.items():
            if not fut.done():
                fut.set_result(found[key])
