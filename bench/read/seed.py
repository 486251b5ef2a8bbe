"""Loads a ``ReadGraph`` into the bench's own Postgres database and Cassandra keyspace.

Postgres (the truth) gets everything through COPY: users, follows, blocks and the whole
post history, then the pull baseline's extra indexes (``bench.read.pull_service``).

Cassandra gets what the pipeline would have written there that our read path can reach
(``seed_serving``), through the fan-out's own stores (``CopyStore``, ``InboxStore``,
``TierStore``): the celebrity tiers; every reader's follows (the reader-side
``following`` copy: the read path reads nothing else of a follow, and the author-side
copy with its state cell costs a read and a batch per follow, minutes here) and blocks;
for every post of the last ``serving_days`` (0: the whole history) and every post some
inbox holds: its copy, rank key and author-timeline row, ``fanned_out`` for ordinary
authors, and its inbox rows (``read_graph.plan_serving``) with the TTL they would have
left. Single-row writes leave in unlogged batches, through the fan-out's own
``WriteCoalescer`` (services/shared/stores/write_coalescer.py), as the fan-out's do.

Store API switch: the serving schema with rank keys in clustering order added
``CopyStore.set_rank_key``, a keyed ``add_author_post``, a keyed ``InboxStore.push`` and
``ranking.rank_key``. ``RANK_KEY_STORES`` says whether this tree has them (detected, and
printed with the results); the legacy calls are used otherwise. Only ``seed_serving``
depends on it.
"""
from __future__ import annotations

import asyncio
import time
from datetime import datetime
from typing import Awaitable, Callable, Iterable, TypeVar

import psycopg

from bench.read.pull_service import create_baseline_indexes
from bench.read.graph import Post, ReadGraph, plan_serving
from services.fanout.audience import PostFields, inbox_ttl_s
from services.fanout.copies import CopyStore
from services.fanout.inbox import InboxStore
from services.fanout.tier_store import TierStore
from services.fanout.tiering import CapacityEstimate, TierPolicy
from services.shared.domain import ranking
from services.shared.settings import Settings
from services.shared.clients import cql, pg
from services.shared.stores.cql_async import CqlRunner
from services.shared.stores.write_coalescer import WriteCoalescer

T = TypeVar("T")


def log(message: str) -> None:
    print(f"[read-grid {time.strftime('%H:%M:%S')}] {message}", flush=True)


RANK_KEY_STORES = hasattr(CopyStore, "set_rank_key") and hasattr(ranking, "rank_key")
# Write timestamp of every seeded row (USING TIMESTAMP): older than anything a live
# process writes, as a replayed snapshot would be.
SEED_LSN = 1
# Coroutines writing at once and statements in flight: enough to keep the one shared
# Cassandra node busy, few enough that bulk writes do not time out on 2 cores.
SEED_WORKERS = 48
SEED_IN_FLIGHT = 128
# Request timeout for the bulk writes: the node is shared with other benchmarks.
SEED_TIMEOUT_S = 20.0
# Rows per COPY write: ~1 MB of text.
COPY_CHUNK_ROWS = 5_000
# Stored engagement score of every seeded post (no likes): the rank is recency only,
# so both services order a reader's posts the same way and pages can be compared.
SEED_SCORE = 0.0


def micros(at: datetime) -> int:
    """``at`` in Unix microseconds, computed as the fan-out does (audience.key_write_ts)."""
    return int(at.timestamp() * 1_000_000)


def rank_key_of(post: Post) -> float:
    """The post's inbox order: the rank key when the stores have one, else its id."""
    if RANK_KEY_STORES:
        return ranking.rank_key(SEED_SCORE, micros(post.created_at) // 1000)  # type: ignore[attr-defined]
    return float(post.post_id)


def _copy(cur: psycopg.Cursor, sql: str, rows: Iterable[tuple[object, ...]]) -> None:
    """COPY ``rows`` as text, in large chunks (several times faster than row by row)."""
    chunk: list[str] = []
    with cur.copy(sql) as cp:
        for row in rows:
            chunk.append("\t".join(_text(v) for v in row))
            if len(chunk) >= COPY_CHUNK_ROWS:
                cp.write("\n".join(chunk) + "\n")
                chunk.clear()
        if chunk:
            cp.write("\n".join(chunk) + "\n")


def _text(value: object) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, str):
        return value.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")
    return str(value)


def seed_postgres(s: Settings, graph: ReadGraph) -> dict[str, int]:
    """COPY the graph into the (migrated, empty) database, then the baseline's indexes."""
    t0 = time.monotonic()
    follows = [(r, a, since) for c in graph.cells for r, fa in c.following.items()
               for a, since in fa.items()]
    blocks = {b for c in graph.cells for b in c.blocks}
    posts = graph.posts()
    with pg.connect(s, autocommit=True) as conn:
        with conn.cursor() as cur:
            _copy(cur, "COPY users (user_id) FROM STDIN", ((u,) for u in graph.users))
            _copy(cur, "COPY follows (follower_id, followed_id, following_since) FROM STDIN", follows)
            _copy(cur, "COPY blocks (blocker_id, blocked_id) FROM STDIN", blocks)
            _copy(cur, "COPY posts (post_id, author_id, created_at, text) FROM STDIN", posts)
        create_baseline_indexes(conn)
    log(f"postgres: {len(posts)} posts, {len(follows)} follows in {time.monotonic() - t0:.0f} s")
    return {"users": len(graph.users), "follows": len(follows), "blocks": len(blocks),
            "posts": len(posts)}


async def bounded(items: Iterable[T], action: Callable[[T], Awaitable[object]],
                  width: int = SEED_WORKERS) -> int:
    """Apply ``action`` to every item, ``width`` at a time; returns how many."""
    todo = iter(items)
    done = 0

    async def worker() -> None:
        nonlocal done
        for item in todo:
            await action(item)
            done += 1
    await asyncio.gather(*(worker() for _ in range(width)))
    return done


async def seed_serving(s: Settings, graph: ReadGraph, now: datetime,
                       serving_days: int) -> dict[str, int]:
    """Write the serving copies of ``graph`` as the fan-out would have; returns counts."""
    session = cql.session(s, timeout=SEED_TIMEOUT_S)
    runner = CqlRunner(session, SEED_IN_FLIGHT)
    writes = WriteCoalescer(runner, linger_s=0.002, max_in_flight=SEED_IN_FLIGHT)
    copies = CopyStore(session, runner, s.fanout_follower_page, writes=writes)
    inbox = InboxStore(session, runner, max_in_flight=SEED_IN_FLIGHT, cap=s.inbox_cap,
                       trim_every=10**9, writes=writes)
    tiers = TierStore(session, runner, TierPolicy(min_dwell_s=0), CapacityEstimate(1, 1.0),
                      lambda: now)
    counts: dict[str, int] = {}
    try:
        for celeb in sorted(graph.celebrities):
            await tiers.tier_for_post(celeb, 10**6)  # any audience is "too slow" at 1 row/s
        follows = [(r, a, since) for c in graph.cells for r, fa in c.following.items()
                   for a, since in fa.items()]
        t0 = time.monotonic()
        counts["follows"] = await bounded(
            follows, lambda f: copies.write_following_copy(*f, SEED_LSN))
        blocks = {b for c in graph.cells for b in c.blocks}
        counts["blocks"] = await bounded(blocks, lambda b: copies.add_block(*b, SEED_LSN))
        log(f"cassandra: {counts['follows']} follows, {counts['blocks']} blocks in "
            f"{time.monotonic() - t0:.0f} s")
        keys: dict[int, float] = {}

        def key(post: Post) -> float:
            if post.post_id not in keys:
                keys[post.post_id] = rank_key_of(post)
            return keys[post.post_id]
        posts, audience = plan_serving(graph, now, s.inbox_cap, serving_days, key)

        async def write(post: Post) -> None:
            fields = PostFields(post.post_id, post.author_id, post.created_at, post.text, [], 1, False)
            ordinary = post.author_id not in graph.celebrities
            readers = audience.get(post.post_id, [])
            ttl = inbox_ttl_s(post.created_at, now)
            await copies.write_post(fields, SEED_LSN)
            if RANK_KEY_STORES:
                k, k_ts = key(post), micros(post.created_at)
                await asyncio.gather(
                    copies.set_rank_key(post.post_id, k, k_ts),  # type: ignore[attr-defined]
                    copies.add_author_post(post.author_id, post.post_id, k, k_ts),  # type: ignore[call-arg]
                    *([copies.mark_fanned_out(post.post_id, True, SEED_LSN)] if ordinary else []),
                    *([inbox.push(readers, post.post_id, post.author_id, k, k_ts, ttl)]  # type: ignore[call-arg]
                      if readers else []))
            else:
                await asyncio.gather(
                    copies.add_author_post(post.author_id, post.post_id, SEED_LSN),
                    *([copies.mark_fanned_out(post.post_id, True, SEED_LSN)] if ordinary else []),
                    *([inbox.push(readers, post.post_id, post.author_id, SEED_LSN, ttl)]
                      if readers else []))
        t0 = time.monotonic()
        counts["posts"] = await bounded(posts, write)
        counts["inbox_rows"] = sum(len(r) for r in audience.values())
        log(f"cassandra: {counts['posts']} posts, {counts['inbox_rows']} inbox rows in "
            f"{time.monotonic() - t0:.0f} s")
    finally:
        session.cluster.shutdown()
    return counts


def seed_all(s: Settings, graph: ReadGraph, now: datetime, serving_days: int) -> dict[str, object]:
    """Both stores at once (Postgres COPY in a thread while Cassandra is written: they
    wait on different servers), timed; what ``read_grid`` prints and keeps."""
    async def both() -> tuple[dict[str, int], dict[str, int]]:
        return await asyncio.gather(asyncio.to_thread(seed_postgres, s, graph),
                                    seed_serving(s, graph, now, serving_days))
    t0 = time.monotonic()
    pg_counts, cql_counts = asyncio.run(both())
    return {"postgres": pg_counts, "cassandra": cql_counts,
            "seconds": round(time.monotonic() - t0, 1), "serving_days": serving_days,
            "store_api": "rank-keys" if RANK_KEY_STORES else "legacy"}
