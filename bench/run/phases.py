"""The measurements of one benchmark run. Each returns plain data for the report.

Reader groups (chosen from the generated graph):
- ``small``: follows few ordinary authors;
- ``large``: follows hundreds of authors (the hard case of a pull feed);
- ``celebs``: follows every celebrity (their posts are merged at read time).
"""
from __future__ import annotations

import asyncio
import json
import random
import time
import uuid
from collections import defaultdict
from typing import Any, Callable

import httpx

from bench.harness.http_load import LoadResult, run_load
from deploy.workload import Graph
from services.api.http.auth import mint_token
from services.shared.clients import pg
from services.shared.domain.rules import VISIBLE
from services.shared.settings import Settings

# The specified "pure fan-out on read" query, on the source of truth.
PULL_QUERY = f"""
SELECT p.post_id, p.created_at FROM posts p
JOIN follows f ON f.followed_id = p.author_id
WHERE f.follower_id = %s AND p.deleted_at IS NULL AND p.visibility = {VISIBLE}
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


async def noop(base_url: str, concurrency: int, seconds: float) -> LoadResult:
    """The server's own ceiling: an endpoint that does nothing (/healthz)."""
    return await run_load(base_url, lambda c, i: c.get("/healthz"), concurrency=concurrency,
                          seconds=seconds)


async def pull_baseline(settings: Settings, users: list[int], concurrency: int,
                        seconds: float) -> LoadResult:
    result = LoadResult(concurrency)
    deadline = time.perf_counter() + seconds
    # No check on checkout (the factory's default): the baseline measured as before.
    async with pg.async_pool(settings, min_size=concurrency, max_size=concurrency, check=None) as pool:
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


async def watch_new_items(client: httpx.AsyncClient, token: str, ready: asyncio.Event,
                          arrived: Callable[[str], Any]) -> None:
    """Hold a reader's realtime stream open (``ready`` once connected) and call
    ``arrived(post_id)`` for each ``new_item`` event, until cancelled."""
    async with client.stream("GET", "/v1/feed/stream",
                             headers={"Authorization": f"Bearer {token}"}) as resp:
        ready.set()
        event = None
        async for line in resp.aiter_lines():
            if line.startswith("event:"):
                event = line.split(":", 1)[1].strip()
            elif line.startswith("data:") and event == "new_item":
                arrived(json.loads(line.split(":", 1)[1])["post_id"])


def posting_authors(graph: Graph, n: int, seed: int) -> dict[int, int]:
    """``n`` ordinary authors (20-2,000 followers) and one follower of each, as
    ``{follower: author}``: the follower holds the stream open for the author's posts."""
    celebs = set(graph.celebrity_ids.tolist())
    followers: dict[int, list[int]] = defaultdict(list)
    for a, b in zip(graph.follower.tolist(), graph.followed.tolist()):
        if b not in celebs:
            followers[b].append(a)
    rng = random.Random(seed)
    authors = rng.sample([a for a, f in followers.items() if 20 <= len(f) <= 2000], n)
    return {rng.choice(followers[a]): a for a in authors}


def visibility_summary(latencies_s: list[float], expected: int) -> dict[str, Any]:
    """Quantiles of commit → ``new_item`` latencies, and how many never arrived."""
    lat = sorted(latencies_s)
    q = lambda p: round(lat[min(len(lat) - 1, int(p * len(lat)))], 3) if lat else None  # noqa: E731
    return {"observed": len(lat), "missed_30s": expected - len(lat), "p50_s": q(0.5),
            "p95_s": q(0.95), "p99_s": q(0.99), "max_s": round(lat[-1], 3) if lat else None}


async def create_post(client: httpx.AsyncClient, secret: str, author: int, text: str) -> str:
    """POST /v1/posts as ``author``; returns the post id once the row is committed (201).
    A post the API refuses stops the bench instead of leaving a figure empty."""
    resp = await client.post(
        "/v1/posts", json={"text": text, "media_ids": []},
        headers={"Authorization": f"Bearer {mint_token(author, secret, ttl_seconds=3600)}",
                 "Idempotency-Key": f"bench-{uuid.uuid4().hex}"})
    if resp.status_code != 201:
        raise RuntimeError(f"bench: POST /v1/posts answered {resp.status_code}: {resp.text[:300]}")
    return resp.json()["post_id"]


class PostWatch:
    """Posts by ordinary authors while one follower of each holds the realtime stream open:
    ``post`` records when the row committed (the 201), the streams when ``new_item`` came."""

    def __init__(self, client: httpx.AsyncClient, settings: Settings, watchers: dict[int, int]) -> None:
        self.client, self.watchers = client, watchers
        self.authors = list(dict.fromkeys(watchers.values()))
        self._secret = settings.jwt_secret.get_secret_value()
        self.committed: dict[str, float] = {}
        self.arrivals: dict[tuple[str, int], float] = {}
        self.expected: list[tuple[str, int]] = []
        self._streams: list[asyncio.Task] = []

    async def __aenter__(self) -> "PostWatch":
        readies = [asyncio.Event() for _ in self.watchers]
        self._streams = [asyncio.create_task(watch_new_items(
            self.client, mint_token(r, self._secret, ttl_seconds=3600), e,
            lambda post_id, r=r: self.arrivals.setdefault((post_id, r), time.perf_counter())))
            for r, e in zip(self.watchers, readies)]
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in readies)), 30)
        return self

    async def post(self, n: int, text: str) -> str:
        """The ``n``-th post (authors in turn); returns its id."""
        author = self.authors[n % len(self.authors)]
        post_id = await create_post(self.client, self._secret, author, text)
        self.committed[post_id] = time.perf_counter()
        self.expected += [(post_id, r) for r, a in self.watchers.items() if a == author]
        return post_id

    async def __aexit__(self, *exc: object) -> None:
        """Wait up to 30 s for every expected ``new_item``, then close the streams."""
        deadline = time.perf_counter() + 30
        while exc[0] is None and time.perf_counter() < deadline and \
                not all(k in self.arrivals for k in self.expected):
            await asyncio.sleep(0.1)
        for task in self._streams:
            task.cancel()
        await asyncio.gather(*self._streams, return_exceptions=True)

    def samples(self, t0: float = 0.0) -> list[tuple[float, float]]:
        """``(committed - t0, commit → new_item)`` per arrived (post, follower)."""
        return sorted((self.committed[p] - t0, self.arrivals[(p, r)] - self.committed[p])
                      for p, r in self.expected if (p, r) in self.arrivals)

    def summary(self) -> dict[str, Any]:
        return visibility_summary([v for _, v in self.samples()], len(self.expected))


async def freshness(base_url: str, settings: Settings, graph: Graph, *, rate: float,
                    seconds: float, authors_n: int = 8) -> dict[str, Any]:
    """Posts at a steady ``rate`` by ordinary authors while followers hold the realtime
    stream open (the product's path for new items: an open snapshot never shifts).
    Latency per (post, follower): the 201 of POST /v1/posts (the row is committed) to the
    ``new_item`` event for that post on the follower's stream, which the API sends only
    after its authorization and eligibility check."""
    n = int(rate * seconds)
    async with httpx.AsyncClient(base_url=base_url, timeout=None) as client:
        async with PostWatch(client, settings, posting_authors(graph, authors_n, seed=3)) as watch:
            t0 = time.perf_counter()
            for i in range(n):
                await watch.post(i, f"fresh {i}")
                await asyncio.sleep(max(0.0, t0 + (i + 1) / rate - time.perf_counter()))
    return {"posts": n, **watch.summary(), "series": watch.samples(t0)}


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


def largest_author_watchers(graph: Graph, n: int) -> dict[int, int]:
    """The ``n`` most-followed authors and the follower ``largest_author_posts`` watches
    (the last by id: the last page the fan-out reaches), as ``{author: watcher}``."""
    counts = graph.follower_counts()
    largest = sorted(counts, key=counts.__getitem__, reverse=True)[:n]
    last: dict[int, int] = {}
    wanted = set(largest)
    for a, b in zip(graph.follower.tolist(), graph.followed.tolist()):
        if b in wanted and a > last.get(b, -1):
            last[b] = a
    return {a: last[a] for a in largest}


async def largest_author_posts(base_url: str, settings: Settings, graph: Graph, authors: list[int],
                               inbox_rows: Callable[[], float] | None = None,
                               timeout_s: float = 300.0,
                               rows_counter: Callable[[], float] | None = None,
                               settle_s: float = 2.0) -> list[dict[str, Any]]:
    """One post by each author in turn, alone, while the author's last follower by id
    (the last page the fan-out reaches) holds the realtime stream open. Per post: the
    201 of POST /v1/posts to ``new_item`` at that follower (``visible_s``), and, given
    ``inbox_rows`` (the fan-out worker's row counter), to the counter having grown by
    the author's follower count (``fanout_s``: every follower's row written). Given
    ``rows_counter`` instead (a hybrid run, where a celebrity's post writes no inbox
    rows), ``inbox_rows`` is the counter's growth from the post until ``settle_s`` after
    it showed: measured, not assumed."""
    followers: dict[int, list[int]] = defaultdict(list)
    wanted = set(authors)
    for a, b in zip(graph.follower.tolist(), graph.followed.tolist()):
        if b in wanted:
            followers[b].append(a)
    out: list[dict[str, Any]] = []
    async with httpx.AsyncClient(base_url=base_url, timeout=None) as client:
        for n, author in enumerate(authors):
            watcher = max(followers[author])
            async with PostWatch(client, settings, {watcher: author}) as watch:
                counter = inbox_rows or rows_counter
                rows0 = await asyncio.to_thread(counter) if counter else 0.0
                post_id = await watch.post(0, f"largest author post {n}")
                committed = watch.committed[post_id]
                fanout_s = rows = None
                while time.perf_counter() < committed + timeout_s:
                    if inbox_rows is not None and fanout_s is None:
                        rows = await asyncio.to_thread(inbox_rows) - rows0
                        if rows >= len(followers[author]):
                            fanout_s = time.perf_counter() - committed
                    if (post_id, watcher) in watch.arrivals and (inbox_rows is None or fanout_s is not None):
                        break
                    await asyncio.sleep(0.05)
            visible = watch.arrivals.get((post_id, watcher))
            if rows_counter is not None and inbox_rows is None:
                await asyncio.sleep(settle_s)
                rows = await asyncio.to_thread(rows_counter) - rows0
            out.append({"author": author, "followers": len(followers[author]),
                        "visible_s": round(visible - committed, 3) if visible else None,
                        "fanout_s": round(fanout_s, 2) if fanout_s is not None else None,
                        "inbox_rows": int(rows) if rows is not None else 0})
    return out


async def warm_up_fanout(base_url: str, settings: Settings, graph: Graph,
                         inbox_rows: Callable[[], float], timeout_s: float = 120.0) -> float:
    """After a fan-out restart: one post by an ordinary author, waiting until the worker
    has written rows (its partitions are assigned), so the next measurement does not
    include the group's rebalance. Returns the seconds it took."""
    counts = graph.follower_counts()
    author = next(a for a, n in sorted(counts.items()) if 20 <= n <= 2000)
    start = time.perf_counter()
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as client:
        await create_post(client, settings.jwt_secret.get_secret_value(), author, "warm-up")
    while time.perf_counter() - start < timeout_s:
        if await asyncio.to_thread(inbox_rows) > 0:
            return time.perf_counter() - start
        await asyncio.sleep(0.2)
    raise RuntimeError("bench: the restarted fan-out wrote no rows")
