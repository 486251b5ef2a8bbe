"""The measurements of one benchmark run. Each returns plain data for the report.

Reader groups (chosen from the generated graph):
- ``small``: follows few ordinary authors;
- ``large``: follows hundreds of authors (the seed's case for the pull baseline);
- ``celebs``: follows every celebrity (their posts are merged at read time).
"""
from __future__ import annotations

import asyncio
import random
import time
from collections import defaultdict
from typing import Any

import httpx
from psycopg_pool import AsyncConnectionPool

from bench.http_load import LoadResult, run_load
from bench.workload import Graph
from services.api.auth import mint_token
from services.common.settings import Settings

# The seed-003 "pure fan-out on read" query, on the source of truth.
PULL_QUERY = """
SELECT p.post_id, p.created_at FROM posts p
JOIN follows f ON f.followed_id = p.author_id
WHERE f.follower_id = %s AND p.deleted_at IS NULL AND p.visibility = 1
ORDER BY p.created_at DESC LIMIT 20
"""


def reader_groups(graph: Graph, per_group: int = 50, seed: int = 11) -> dict[str, list[int]]:
    rng = random.Random(seed)
    celebs = set(graph.celebrity_ids.tolist())
    following: dict[int, set[int]] = defaultdict(set)
    for a, b in zip(graph.follower.tolist(), graph.followed.tolist()):
        following[a].add(b)
    small = [u for u, f in following.items() if 3 <= len(f - celebs) <= 10 and not f & celebs]
    large = sorted(following, key=lambda u: len(following[u]), reverse=True)[: per_group * 2]
    fans = [u for u, f in following.items() if celebs <= f]
    pick = lambda xs: rng.sample(xs, min(per_group, len(xs)))  # noqa: E731
    groups = {"small": pick(small), "large": pick(large), "celebs": pick(fans)}
    groups["_follows"] = {g: round(sum(len(following[u]) for u in us) / max(1, len(us)), 1)
                          for g, us in groups.items()}  # type: ignore[assignment]
    return groups


def _tokens(settings: Settings, users: list[int]) -> list[str]:
    secret = settings.jwt_secret.get_secret_value()
    return [mint_token(u, secret, ttl_seconds=6 * 3600) for u in users]


async def feed_reads(base_url: str, settings: Settings, users: list[int], concurrency: int,
                     seconds: float) -> dict[str, LoadResult]:
    """First pages (each builds a snapshot), then next pages from cursors of those."""
    tokens = _tokens(settings, users)
    cursors: list[tuple[str, str]] = []

    async def first(client: httpx.AsyncClient, i: int) -> httpx.Response:
        token = tokens[random.randrange(len(tokens))]
        resp = await client.get("/v1/feed", params={"limit": 20},
                                headers={"Authorization": f"Bearer {token}"})
        if resp.status_code == 200 and resp.json().get("next_cursor"):
            cursors.append((token, resp.json()["next_cursor"]))
        return resp

    async def nxt(client: httpx.AsyncClient, i: int) -> httpx.Response:
        token, cursor = cursors[random.randrange(len(cursors))]
        return await client.get("/v1/feed", params={"limit": 20, "cursor": cursor},
                                headers={"Authorization": f"Bearer {token}"})

    out = {"first": await run_load(base_url, first, concurrency=concurrency, seconds=seconds)}
    if cursors:
        out["next"] = await run_load(base_url, nxt, concurrency=concurrency, seconds=seconds)
    return out


async def noop(base_url: str, concurrency: int, seconds: float) -> LoadResult:
    """The server's own ceiling: an endpoint that does nothing (/healthz)."""
    return await run_load(base_url, lambda c, i: c.get("/healthz"), concurrency=concurrency,
                          seconds=seconds)


async def pull_baseline(settings: Settings, users: list[int], concurrency: int,
                        seconds: float) -> LoadResult:
    result = LoadResult(concurrency)
    deadline = time.perf_counter() + seconds
    async with AsyncConnectionPool(settings.pg_dsn, min_size=concurrency, max_size=concurrency) as pool:
        async def worker() -> None:
            while time.perf_counter() < deadline:
                start = time.perf_counter()
                async with pool.connection() as conn:
                    await (await conn.execute(PULL_QUERY, (random.choice(users),))).fetchall()
                result.latencies_s.append(time.perf_counter() - start)
        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        result.wall_s = time.perf_counter() - start
    return result


async def freshness(base_url: str, settings: Settings, graph: Graph, *, rate: float,
                    seconds: float, watchers: int = 4, poll_s: float = 0.05) -> dict[str, Any]:
    """Posts at a steady ``rate`` by ordinary authors; for each post one follower polls its
    first page until the post is there. Commit time = the 201 answer of POST /v1/posts
    (the transaction committed before it)."""
    celebs = set(graph.celebrity_ids.tolist())
    followers: dict[int, list[int]] = defaultdict(list)
    for a, b in zip(graph.follower.tolist(), graph.followed.tolist()):
        if b not in celebs:
            followers[b].append(a)
    authors = [a for a, f in followers.items() if 20 <= len(f) <= 2000][:200] or list(followers)[:50]
    secret = settings.jwt_secret.get_secret_value()
    samples: list[tuple[float, float]] = []  # (seconds since start, latency)
    missed = 0
    sem = asyncio.Semaphore(watchers * 4)
    t0 = time.perf_counter()

    async def watch(client: httpx.AsyncClient, reader: int, post_id: str, committed: float) -> None:
        nonlocal missed
        token = mint_token(reader, secret, ttl_seconds=3600)
        async with sem:
            while time.perf_counter() - committed < 30:
                resp = await client.get("/v1/feed", params={"limit": 5},
                                        headers={"Authorization": f"Bearer {token}"})
                if resp.status_code == 200 and any(it["post_id"] == post_id for it in resp.json()["items"]):
                    samples.append((committed - t0, time.perf_counter() - committed))
                    return
                await asyncio.sleep(poll_s)
        missed += 1

    async with httpx.AsyncClient(base_url=base_url, timeout=30) as client:
        tasks = []
        n = int(rate * seconds)
        for i in range(n):
            author = authors[i % len(authors)]
            token = mint_token(author, secret, ttl_seconds=3600)
            resp = await client.post("/v1/posts", json={"text": f"fresh {i}", "media_ids": []},
                                     headers={"Authorization": f"Bearer {token}",
                                              "Idempotency-Key": f"bench-{t0}-{i}"})
            committed = time.perf_counter()
            if resp.status_code == 201:
                reader = random.choice(followers[author])
                tasks.append(asyncio.create_task(watch(client, reader, resp.json()["post_id"], committed)))
            await asyncio.sleep(max(0.0, t0 + (i + 1) / rate - time.perf_counter()))
        await asyncio.gather(*tasks)
    lat = sorted(x[1] for x in samples)
    q = lambda p: round(lat[min(len(lat) - 1, int(p * len(lat)))], 3) if lat else None  # noqa: E731
    return {"posts": int(rate * seconds), "observed": len(lat), "missed_30s": missed,
            "p50_s": q(0.5), "p95_s": q(0.95), "p99_s": q(0.99), "max_s": lat[-1] if lat else None,
            "series": samples}


def fanout_on_write_rows(graph: Graph) -> dict[str, float]:
    """Rows one post costs under pure fan-out-on-write vs. the hybrid, per author class,
    from the generated graph's exact follower counts."""
    counts = graph.follower_counts()
    celebs = set(graph.celebrity_ids.tolist())
    posts_by_author: dict[int, int] = defaultdict(int)
    for _pid, author, _c, _t in graph.posts:
        posts_by_author[author] += 1
    push = sum(counts.get(a, 0) * n for a, n in posts_by_author.items())
    hybrid = sum(counts.get(a, 0) * n for a, n in posts_by_author.items() if a not in celebs)
    total = sum(posts_by_author.values())
    return {"posts": total, "push_rows": push, "hybrid_rows_static_tiers": hybrid,
            "push_rows_per_post": round(push / total, 1),
            "largest_author_followers": max(counts.values())}
