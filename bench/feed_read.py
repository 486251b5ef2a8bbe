"""Feed read benchmark: GET /v1/feed first and next pages against the pull baseline.

    .venv/bin/python bench/feed_read.py [--readers 12] [--requests 60] [--concurrency 1,4,16]

Builds one graph on its own Postgres database and Cassandra keyspace (dropped at the
end) and serves it with a real ``python -m services.api`` subprocess:

* 400 ordinary authors with 3 posts each over the last day, 20 celebrities with 10;
* reader classes: ``small`` (follows 10 ordinary), ``large`` (300 ordinary) and
  ``celebs`` (50 ordinary + all 20 celebrities);
* Cassandra rows written with the fan-out's own stores (copies, author partitions,
  inbox rows for ordinary posts only), Postgres rows for the same graph.

For each class and concurrency level: ``--requests`` walks of first page + next page
(limit 20) over HTTP, latency p50/p95/p99 per kind and pages/s; then the pure
fan-out-on-read query of seed 003 (posts JOIN follows ORDER BY created_at, first page and
keyset next page) on Postgres, same readers, same concurrency, timed at the driver (no
HTTP: the baseline gets the benefit of the doubt).
"""
from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import socket
import statistics
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import psycopg  # noqa: E402
from psycopg_pool import AsyncConnectionPool  # noqa: E402

from deploy.migrate import migrate_cassandra, migrate_postgres  # noqa: E402
from services.api.auth import mint_token  # noqa: E402
from services.common import cql, ids  # noqa: E402
from services.common.settings import Settings  # noqa: E402
from services.fanout.audience import PostFields  # noqa: E402
from services.fanout.copies import CopyStore  # noqa: E402
from services.fanout.cql_async import CqlRunner  # noqa: E402
from services.fanout.inbox import InboxStore  # noqa: E402
from services.fanout.tier_store import TierStore  # noqa: E402
from services.fanout.tiering import CapacityEstimate, TierPolicy  # noqa: E402

ORDINARY, CELEBS, POSTS_ORD, POSTS_CELEB = 400, 20, 3, 10
CLASSES = {"small": (10, 0), "large": (300, 0), "celebs": (50, CELEBS)}
PULL_FIRST = ("SELECT p.post_id, p.author_id, p.text, p.created_at FROM posts p "
              "JOIN follows f ON f.followed_id = p.author_id WHERE f.follower_id = %s "
              "AND p.deleted_at IS NULL AND p.visibility = 1 "
              "ORDER BY p.created_at DESC, p.post_id DESC LIMIT 20")
PULL_NEXT = ("SELECT p.post_id, p.author_id, p.text, p.created_at FROM posts p "
             "JOIN follows f ON f.followed_id = p.author_id WHERE f.follower_id = %s "
             "AND p.deleted_at IS NULL AND p.visibility = 1 AND (p.created_at, p.post_id) < (%s, %s) "
             "ORDER BY p.created_at DESC, p.post_id DESC LIMIT 20")


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000 if ordered else float("nan")


def summary(values: list[float]) -> str:
    return f"p50 {pct(values, .5):6.1f}  p95 {pct(values, .95):6.1f}  p99 {pct(values, .99):6.1f} ms"


async def seed(s: Settings, readers_per_class: int, rng: secrets.SystemRandom) -> dict[str, list[int]]:
    session = cql.session(s)
    runner = CqlRunner(session)
    copies = CopyStore(session, runner, 500)
    inbox = InboxStore(session, runner, max_in_flight=64, cap=500, trim_every=10**9)
    tiers = TierStore(session, runner, TierPolicy(min_dwell_s=0), CapacityEstimate(1, 1.0),
                      lambda: datetime.now(timezone.utc))
    base = 10**15 + rng.randrange(10**12)
    ordinary = [base + i for i in range(ORDINARY)]
    celebs = [base + 10_000 + i for i in range(CELEBS)]
    now = datetime.now(timezone.utc)
    since = now - timedelta(days=30)
    readers: dict[str, list[int]] = {}
    follows: list[tuple[int, int]] = []
    uid = base + 20_000
    for name, (n_ord, n_celeb) in CLASSES.items():
        readers[name] = []
        for _ in range(readers_per_class):
            uid += 1
            readers[name].append(uid)
            follows += [(uid, a) for a in rng.sample(ordinary, n_ord) + celebs[:n_celeb]]
    followers: dict[int, list[int]] = {}
    for r, a in follows:
        followers.setdefault(a, []).append(r)
    follow_slots = asyncio.Semaphore(32)

    async def follow(r: int, a: int) -> None:
        async with follow_slots:
            await copies.add_follow(r, a, since, 1)
    await asyncio.gather(*(follow(r, a) for r, a in follows))
    for c in celebs:
        await tiers.tier_for_post(c, 10**6)
    posts: list[tuple[int, int, datetime, str]] = []
    seq = 0
    for author, n in [(a, POSTS_ORD) for a in ordinary] + [(c, POSTS_CELEB) for c in celebs]:
        for _ in range(n):
            seq += 1
            at = now - timedelta(seconds=rng.randrange(20 * 3600))
            posts.append((ids.compose(int(at.timestamp() * 1000), 7, seq % 4096), author, at,
                          f"post {seq} " + "x" * rng.randrange(40, 200)))
    posts = list({p[0]: p for p in posts}.values())
    celeb_set = set(celebs)

    async def one(post: tuple[int, int, datetime, str]) -> None:
        post_id, author, at, text = post
        await copies.write_post(PostFields(post_id, author, at, text, [], 1, False), 1)
        await copies.add_author_post(author, post_id, 1)
        if author not in celeb_set:
            await copies.mark_fanned_out(post_id, True, 1)
            await inbox.push(followers.get(author, []), post_id, author, 1)
    sem = asyncio.Semaphore(32)

    async def bounded(post: tuple[int, int, datetime, str]) -> None:
        async with sem:
            await one(post)
    await asyncio.gather(*(bounded(p) for p in posts))
    session.cluster.shutdown()
    with psycopg.connect(s.pg_dsn, autocommit=True) as conn:
        users = {r for r, _ in follows} | set(ordinary) | celeb_set
        with conn.cursor() as cur:
            with cur.copy("COPY users (user_id) FROM STDIN") as cp:
                for u in users:
                    cp.write_row((u,))
            with cur.copy("COPY follows (follower_id, followed_id, following_since) FROM STDIN") as cp:
                for r, a in follows:
                    cp.write_row((r, a, since))
            with cur.copy("COPY posts (post_id, author_id, created_at, text) FROM STDIN") as cp:
                for p in posts:
                    cp.write_row(p)
        conn.execute("ANALYZE")
    print(f"seeded {len(posts)} posts, {len(follows)} follows, "
          f"{sum(len(followers.get(p[1], [])) for p in posts if p[1] not in celeb_set)} inbox rows")
    return readers


async def api_walks(base_url: str, s: Settings, readers: list[int], requests: int,
                    concurrency: int) -> tuple[list[float], list[float], float]:
    secret = s.jwt_secret.get_secret_value()
    tokens = {r: mint_token(r, secret) for r in readers}
    first: list[float] = []
    nxt: list[float] = []
    todo = list(range(requests))
    limits = httpx.Limits(max_connections=concurrency)
    async with httpx.AsyncClient(base_url=base_url, limits=limits, timeout=30) as client:
        async def worker() -> None:
            while todo:
                i = todo.pop()
                headers = {"Authorization": f"Bearer {tokens[readers[i % len(readers)]]}"}
                t0 = time.perf_counter()
                page = (await client.get("/v1/feed", headers=headers)).raise_for_status().json()
                first.append(time.perf_counter() - t0)
                if page["next_cursor"]:
                    t0 = time.perf_counter()
                    (await client.get("/v1/feed", headers=headers,
                                      params={"cursor": page["next_cursor"]})).raise_for_status()
                    nxt.append(time.perf_counter() - t0)
        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - started
    return first, nxt, (len(first) + len(nxt)) / wall


async def pull_walks(pool: AsyncConnectionPool, readers: list[int], requests: int,
                     concurrency: int) -> tuple[list[float], list[float], float]:
    first: list[float] = []
    nxt: list[float] = []
    todo = list(range(requests))

    async def worker() -> None:
        while todo:
            reader = readers[todo.pop() % len(readers)]
            async with pool.connection() as conn:
                t0 = time.perf_counter()
                rows = await (await conn.execute(PULL_FIRST, (reader,))).fetchall()
                first.append(time.perf_counter() - t0)
                if rows:
                    t0 = time.perf_counter()
                    await (await conn.execute(PULL_NEXT, (reader, rows[-1][3], rows[-1][0]))).fetchall()
                    nxt.append(time.perf_counter() - t0)
    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return first, nxt, (len(first) + len(nxt)) / (time.perf_counter() - started)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def measure(args: argparse.Namespace, s: Settings, readers: dict[str, list[int]],
                  base_url: str) -> None:
    pool = AsyncConnectionPool(s.pg_dsn, min_size=4, max_size=16, open=False)
    await pool.open(wait=True)
    levels = [int(c) for c in args.concurrency.split(",")]
    print(f"{'class':7} {'conc':>4} {'kind':6} {'API first/next page':45} {'pages/s':>8} | "
          f"{'pull baseline (Postgres)':45} {'q/s':>7} | p95 ratio")
    try:
        for name, group in readers.items():
            for r in group[:2]:  # warm the process's caches of users and statements
                await api_walks(base_url, s, [r], 2, 1)
            for conc in levels:
                f, n, rate = await api_walks(base_url, s, group, args.requests, conc)
                pf, pn, prate = await pull_walks(pool, group, args.requests, conc)
                for kind, a, b in (("first", f, pf), ("next", n, pn)):
                    ratio = pct(a, .95) / pct(b, .95) if b else float("nan")
                    print(f"{name:7} {conc:4} {kind:6} {summary(a):45} {rate:8.1f} | "
                          f"{summary(b):45} {prate:7.1f} | {ratio:5.2f}")
    finally:
        await pool.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--readers", type=int, default=12)
    parser.add_argument("--requests", type=int, default=60)
    parser.add_argument("--concurrency", default="1,4,16")
    args = parser.parse_args()
    name = f"bench_feed_{secrets.token_hex(3)}"
    base = Settings()
    s = Settings(pg_database=name, cassandra_keyspace=name, topic_prefix="feed")
    with psycopg.connect(base.pg_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    api = None
    try:
        migrate_postgres(s)
        migrate_cassandra(s, name)
        readers = asyncio.run(seed(s, args.readers, secrets.SystemRandom()))
        port = free_port()
        env = dict(os.environ, FEED_PG_DATABASE=name, FEED_CASSANDRA_KEYSPACE=name,
                   FEED_API_PORT=str(port), FEED_TOPIC_PREFIX="feed")
        api = subprocess.Popen([sys.executable, "-m", "services.api"], cwd=ROOT, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        base_url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(base_url + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or api.poll() is not None:
                raise RuntimeError("API did not start")
            time.sleep(0.2)
        asyncio.run(measure(args, s, readers, base_url))
    finally:
        if api is not None:
            api.terminate()
            api.wait(30)
        with psycopg.connect(base.pg_dsn, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        cl = cql.cluster(s, timeout=60)
        cl.connect().execute(f"DROP KEYSPACE IF EXISTS {name}")
        cl.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
