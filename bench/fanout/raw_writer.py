"""The best raw Cassandra writer we can build here, for the fan-out's rows/s to be a ratio
to: the fan-out's own rows, written as fast as a client that knows them all in
advance can.

    .venv/bin/python -m bench.fanout.raw_writer [--rows 20000] [--readers 2000]   # standalone

Rows are the fan-out's: ``feed_inbox (reader_id, rank_key, post_id, author_id)`` with the
inbox TTL (``rules.INBOX_TTL_S``) and a write timestamp, into a scratch keyspace made by the same migrations
(same replication as the bench's). ``bench.run`` passes the (reader, post) pairs of the
history it fanned out, so the partition spread is the fan-out's own; standalone, posts go
to a random set of readers. Every strategy is one prepared INSERT, token-aware routing
(the driver's default policy), through ``CqlRunner.run_bounded``; batches keep their rows
serialized as the fan-out's do (``write_coalescer.serialized_batch``: each post's values
bound once, each row a pack of its reader; ``bind`` per row had cost ~4 µs, about half of
this client's CPU per row):

* ``rows``: one row per request;
* ``partition``: unlogged batches of one reader's rows (one partition, up to ``size``);
* ``replicas``: unlogged batches of readers sharing their replicas, up to ``size`` rows,
  each reader's rows together (one partition mutation for all of a reader's posts);
* ``posts``: batches of one post's readers sharing their replicas, posts in the order
  given: what the fan-out sends, which writes each post as it arrives (one partition
  mutation per row). Not the baseline's best in general; it
  is reported beside it to show how much of the gap is the grouping by reader that
  knowing every row in advance allows.

Each at several requests in flight; the best rows/s is the baseline, and every tried
setting is reported beside it. One Python process, like the fan-out worker.
"""
from __future__ import annotations

import argparse
import asyncio
import random
import struct
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Callable, ContextManager, Iterable, Sequence

from services.shared.domain.rules import INBOX_TTL_S
from services.shared.runtime import collector_tuned
from services.shared.settings import get_settings
from services.shared.stores.cql_async import CqlRunner, replica_group
from services.shared.stores.write_coalescer import serialized_batch

# (strategy, rows per request, requests in flight)
SETTINGS: tuple[tuple[str, int, int], ...] = (
    ("rows", 1, 64), ("rows", 1, 256),
    ("partition", 50, 16), ("partition", 50, 64),
    ("replicas", 50, 16), ("replicas", 50, 64), ("replicas", 200, 16),
    ("posts", 50, 16), ("posts", 200, 16),
)
_BIGINT = struct.Struct(">q")


@dataclass(frozen=True)
class Tried:
    strategy: str
    size: int
    in_flight: int
    rows: int
    seconds: float
    cpu_s: float = 0.0  # this process's CPU (every thread: the driver's I/O loop too)
    server_cpu_s: float | None = None  # the store's processes' CPU, when the caller can see them

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.seconds if self.seconds else 0.0

    def summary(self) -> dict[str, Any]:
        return {"strategy": self.strategy, "rows per request (at most)": self.size,
                "in flight": self.in_flight, "rows": self.rows, "seconds": round(self.seconds, 2),
                "rows/s": round(self.rows_per_s),
                "client CPU µs per row (computed)": round(self.cpu_s * 1e6 / self.rows, 1) if self.rows else None,
                "Cassandra CPU µs per row (computed)": (round(self.server_cpu_s * 1e6 / self.rows, 1)
                                                        if self.rows and self.server_cpu_s is not None else None)}


def _requests(session: Any, stmt: Any, strategy: str, size: int, pairs: Sequence[tuple[int, int]],
              ttl_s: int, ts: int) -> list[tuple[Any, Sequence[Any]]]:
    def params(reader: int, post: int) -> tuple:
        return (reader, float(post), post, 1, ttl_s, ts)

    if strategy == "rows":
        return [(stmt, params(r, p)) for r, p in pairs]
    # A batch's rows are kept serialized, as the fan-out's (``WriteCoalescer.write_keyed``):
    # each post's values are bound once, and each row costs a pack of its reader.
    tails: dict[int, list[Any]] = {}
    pack = _BIGINT.pack

    def values(reader: int, post: int) -> list[Any]:
        tail = tails.get(post)
        if tail is None:
            tail = tails[post] = list(stmt.bind(params(0, post)).values[1:])
        return [pack(reader), *tail]

    replicas: dict[int, Any] = {}

    def replicas_of(reader: int) -> Any:
        if reader not in replicas:
            replicas[reader] = replica_group(session, pack(reader))
        return replicas[reader]

    groups: dict[Any, list[tuple[int, int]]] = defaultdict(list)
    if strategy == "posts":
        # One post's readers that share replicas, in the order given: a batch never
        # holds two posts (nor, so, two rows of one reader).
        for r, p in pairs:
            groups[replicas_of(r), p].append((r, p))
        return serialized_batches(stmt.query_id, values, list(groups.values()), size, session.keyspace)
    by_reader: dict[int, list[int]] = defaultdict(list)
    for r, p in pairs:
        by_reader[r].append(p)
    for r, posts in by_reader.items():
        groups[r if strategy == "partition" else replicas_of(r)] += [(r, p) for p in posts]
    return serialized_batches(stmt.query_id, values, list(groups.values()), size, session.keyspace)


def serialized_batches(query_id: bytes, values: Callable[[int, int], list[Any]],
             groups: list[list[tuple[int, int]]], size: int,
             keyspace: str | None) -> list[tuple[Any, Sequence[Any]]]:
    """Unlogged batches of at most ``size`` rows of each group, routed to a replica of
    their first row (token-aware, as ``BatchStatement.add`` of bound rows would)."""
    out: list[tuple[Any, Sequence[Any]]] = []
    for group in groups:
        for start in range(0, len(group), size):
            rows = [(query_id, values(r, p)) for r, p in group[start:start + size]]
            out.append((serialized_batch(rows, rows[0][1][0], keyspace), ()))
    return out


async def _one(session: Any, runner: CqlRunner, stmt: Any, strategy: str, size: int, in_flight: int,
               pairs: Sequence[tuple[int, int]], ttl_s: int,
               server_cpu: Callable[[], float] | None = None) -> Tried:
    # Building the batches is the client's work too: it is inside the timed window.
    server = server_cpu() if server_cpu else 0.0
    start, cpu = time.perf_counter(), time.process_time()
    requests = _requests(session, stmt, strategy, size, pairs, ttl_s, time.time_ns() // 1000)
    await runner.run_bounded(requests, in_flight)
    seconds, cpu_s = time.perf_counter() - start, time.process_time() - cpu
    return Tried(strategy, size, in_flight, len(pairs), seconds, cpu_s,
                 server_cpu() - server if server_cpu else None)


def worker_collector() -> ContextManager[None]:
    """The collector settings a fan-out worker runs with (services/shared/runtime.py), for
    a baseline client in this process: no baseline pays collections the worker is spared."""
    s = get_settings()
    return collector_tuned(s.worker_gc_gen0_threshold, s.worker_gc_freeze)


def inbox_insert(session: Any, table: str) -> Any:
    """The prepared INSERT of one row into ``table``, a table of ``feed_inbox``'s shape,
    with its TTL and write timestamp bound per row: every baseline writes through it."""
    return session.prepare(f"INSERT INTO {table} (reader_id, rank_key, post_id, author_id) "
                           "VALUES (?,?,?,?) USING TTL ? AND TIMESTAMP ?")


def best_raw_rate(session: Any, pairs: Sequence[tuple[int, int]], ttl_s: int,
                  settings: Iterable[tuple[str, int, int]] = SETTINGS,
                  table: str = "feed_inbox",
                  server_cpu: Callable[[], float] | None = None) -> dict[str, Any]:
    """Write ``pairs`` (reader, post) once per setting, after a warm-up pass; the best
    rows/s and every setting tried. ``session`` is on a scratch keyspace, or ``table`` is
    a scratch table of ``feed_inbox``'s shape. ``server_cpu`` (CPU seconds of the store's
    processes so far) adds the store's CPU per row to each setting."""
    stmt = inbox_insert(session, table)
    runner = CqlRunner(session)

    async def sweep() -> list[Tried]:
        warm = pairs[: max(1, len(pairs) // 5)]
        await _one(session, runner, stmt, "replicas", 50, 16, warm, ttl_s)
        # One row a request is an order of magnitude slower: a quarter of the rows is
        # enough for its rate and keeps the sweep short.
        return [await _one(session, runner, stmt, s, size, n,
                           pairs[: max(1, len(pairs) // 4)] if s == "rows" else pairs, ttl_s,
                           server_cpu)
                for s, size, n in settings]

    with worker_collector():  # the fan-out worker's collector settings (runtime.py)
        tried = asyncio.run(sweep())
    best = max(tried, key=lambda t: t.rows_per_s)
    readers = len({r for r, _ in pairs})
    return {"rows_per_s": round(best.rows_per_s), "best": best.summary(), "rows": len(pairs),
            "readers (partitions)": readers, "ttl_s": ttl_s,
            "tried": [t.summary() for t in tried]}


def raw_once(session: Any, pairs: Sequence[tuple[int, int]], ttl_s: int, table: str,
             strategy: str, size: int, in_flight: int) -> Tried:
    """``pairs`` written once with one setting (the sweep's best), no warm-up: for a
    window of the caller's own (bench/fanout/alike.py)."""
    stmt = inbox_insert(session, table)
    with worker_collector():
        return asyncio.run(_one(session, CqlRunner(session), stmt, strategy, size, in_flight,
                                pairs, ttl_s))


def best_of(result: dict[str, Any], strategy: str) -> dict[str, Any] | None:
    """The fastest setting of ``strategy`` among ``best_raw_rate``'s tried ones, if any."""
    tried = [t for t in result.get("tried", []) if t["strategy"] == strategy]
    return max(tried, key=lambda t: t["rows/s"]) if tried else None


def history_posts(follower: Sequence[int], followed: Sequence[int],
                  posts: Iterable[tuple[int, int, Any, Any]], skip_authors: set[int],
                  limit: int) -> tuple[list[tuple[int, int]], dict[int, list[int]]]:
    """The posts ``(post_id, author)`` a fan-out of ``posts`` writes rows for (authors
    not in ``skip_authors`` with followers), in post order, until they make ``limit``
    rows; and each author's followers."""
    fans: dict[int, list[int]] = defaultdict(list)
    for a, b in zip(follower, followed):
        fans[b].append(a)
    out: list[tuple[int, int]] = []
    rows = 0
    for post_id, author, *_ in posts:
        if author in skip_authors or not fans.get(author):
            continue
        out.append((post_id, author))
        rows += len(fans[author])
        if rows >= limit:
            break
    return out, fans


def pairs_of(posts: Iterable[tuple[int, int]], fans: dict[int, list[int]],
             limit: int) -> list[tuple[int, int]]:
    """The (reader, post) rows of ``posts`` ((post_id, author)), in post order, at most ``limit``."""
    return [(reader, post_id) for post_id, author in posts for reader in fans[author]][:limit]


def main() -> int:
    from bench.harness.pipeline import bench_settings, fresh_stores
    from services.shared.clients import cql

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=20_000)
    ap.add_argument("--readers", type=int, default=2_000)
    args = ap.parse_args()
    s = bench_settings("bench_raw")
    fresh_stores(s)
    rng = random.Random(7)
    pairs = [(10**12 + rng.randrange(args.readers), 10**15 + i) for i in range(args.rows)]
    session = cql.session(s)
    try:
        result = best_raw_rate(session, pairs, INBOX_TTL_S)
    finally:
        session.cluster.shutdown()
    for t in result["tried"]:
        print(t)
    print(f"best: {result['best']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
