"""Feed read benchmark: GET /v1/feed first and next pages against the pull baseline.

    .venv/bin/python bench/feed_read.py [--readers 12] [--requests 200] [--concurrency 1,4,16]
        [--api NAME=ROOT[:WORKERS] ...]

Builds one graph on its own Postgres database and Cassandra keyspace (dropped at the
end) and serves it with real ``python -m services.api`` subprocesses:

* 400 ordinary authors with 20-150 posts each over ``HISTORY_DAYS`` (28), 20 celebrities
  with 10 a day: ~40,000 posts, so a reader following 300 authors makes the pull query
  top-N sort ~25,000 rows, as a real month of history would;
* reader classes: ``small`` (follows 10 ordinary), ``large`` (300 ordinary) and
  ``celebs`` (50 ordinary + all 20 celebrities), following since before the history;
* Postgres holds the whole history. Cassandra holds what the pipeline would: every copy
  and author-partition row (day buckets), written with the fan-out's own stores, and
  inbox rows only for ordinary posts of the last 7 days (the inbox TTL), at most
  ``inbox_cap`` (500) per reader, newest first (what trimming leaves).

``--api`` (repeatable) names API builds to compare in the same run, e.g.
``--api before=/tmp/feed_before:1 --api after=.:2`` (a source tree, e.g. from
``git archive``, and its worker count; default: this tree with its default workers). All
builds serve at once; for each class and concurrency each build is measured in turn,
then the pull baseline. A measurement is ``--requests`` walks of first page + next page
(limit 20) over HTTP: p50/p95/p99 per kind and pages/s. The baseline is the pure
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
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import bench  # noqa: E402,F401 - sets FEED_DEV_MODE when run as a script
import httpx  # noqa: E402
import psycopg  # noqa: E402
from psycopg_pool import AsyncConnectionPool  # noqa: E402

from deploy.migrate import migrate_cassandra, migrate_postgres  # noqa: E402
from services.api.auth import mint_token  # noqa: E402
from services.common import cql, ids  # noqa: E402
from services.common.cql_async import CqlRunner  # noqa: E402
from services.common.settings import Settings  # noqa: E402
from services.fanout.audience import PostFields  # noqa: E402
from services.fanout.copies import CopyStore  # noqa: E402
from services.fanout.inbox import InboxStore  # noqa: E402
from services.fanout.tier_store import TierStore  # noqa: E402
from services.fanout.tiering import CapacityEstimate, TierPolicy  # noqa: E402

ORDINARY, CELEBS = 400, 20
HISTORY_DAYS = 28
POSTS_ORD = (20, 150)          # per ordinary author over the history (uniform)
POSTS_CELEB = 10 * HISTORY_DAYS
INBOX_TTL_DAYS = 7             # inbox default_time_to_live (0001_serving.cql)
CLASSES = {"small": (10, 0), "large": (300, 0), "celebs": (50, CELEBS)}
PULL_FIRST = ("SELECT p.post_id, p.author_id, p.text, p.created_at FROM posts p "
              "JOIN follows f ON f.followed_id = p.author_id WHERE f.follower_id = %s "
              "AND p.deleted_at IS NULL AND p.visibility = 1 "
              "ORDER BY p.created_at DESC, p.post_id DESC LIMIT 20")
PULL_NEXT = ("SELECT p.post_id, p.author_id, p.text, p.created_at FROM posts p "
             "JOIN follows f ON f.followed_id = p.author_id WHERE f.follower_id = %s "
             "AND p.deleted_at IS NULL AND p.visibility = 1 AND (p.created_at, p.post_id) < (%s, %s) "
             "ORDER BY p.created_at DESC, p.post_id DESC LIMIT 20")


@dataclass
class Api:
    name: str
    root: Path
    workers: int | None
    url: str = ""
    process: subprocess.Popen | None = None


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000 if ordered else float("nan")


def summary(values: list[float]) -> str:
    return f"p50 {pct(values, .5):6.1f}  p95 {pct(values, .95):6.1f}  p99 {pct(values, .99):6.1f} ms"


def make_posts(rng: secrets.SystemRandom, ordinary: list[int], celebs: list[int],
               now: datetime) -> list[tuple[int, int, datetime, str]]:
    """The whole history: ``(post_id, author_id, created_at, text)``, unique ids."""
    posts: dict[int, tuple[int, int, datetime, str]] = {}
    counts = [(a, rng.randint(*POSTS_ORD)) for a in ordinary] + [(c, POSTS_CELEB) for c in celebs]
    seq = 0
    for author, n in counts:
        for _ in range(n):
            seq += 1
            at = now - timedelta(seconds=rng.randrange(HISTORY_DAYS * 86400))
            post_id = ids.compose(int(at.timestamp() * 1000), 7, seq % 4096)
            posts[post_id] = (post_id, author, at, f"post {seq} " + "x" * rng.randrange(40, 200))
    return list(posts.values())


def inbox_rows(follows: list[tuple[int, int]], posts: list[tuple[int, int, datetime, str]],
               celeb_set: set[int], now: datetime, cap: int) -> dict[int, list[int]]:
    """post_id -> readers whose inbox holds it: ordinary posts of the TTL window, top ``cap``."""
    recent: dict[int, list[tuple[int, int]]] = {}
    horizon = now - timedelta(days=INBOX_TTL_DAYS)
    for post_id, author, at, _ in posts:
        if author not in celeb_set and at >= horizon:
            recent.setdefault(author, []).append((post_id, author))
    readers_of: dict[int, list[int]] = {}
    by_reader: dict[int, list[int]] = {}
    for reader, author in follows:
        by_reader.setdefault(reader, []).extend(p for p, _ in recent.get(author, ()))
    for reader, post_ids in by_reader.items():
        for post_id in sorted(post_ids, reverse=True)[:cap]:
            readers_of.setdefault(post_id, []).append(reader)
    return readers_of


async def seed(s: Settings, readers_per_class: int, rng: secrets.SystemRandom) -> dict[str, list[int]]:
    session = cql.session(s)
    runner = CqlRunner(session)
    copies = CopyStore(session, runner, 500)
    inbox = InboxStore(session, runner, max_in_flight=64, cap=s.inbox_cap, trim_every=10**9)
    tiers = TierStore(session, runner, TierPolicy(min_dwell_s=0), CapacityEstimate(1, 1.0),
                      lambda: datetime.now(timezone.utc))
    base = 10**15 + rng.randrange(10**12)
    ordinary = [base + i for i in range(ORDINARY)]
    celebs = [base + 10_000 + i for i in range(CELEBS)]
    now = datetime.now(timezone.utc)
    since = now - timedelta(days=HISTORY_DAYS + 2)
    readers: dict[str, list[int]] = {}
    follows: list[tuple[int, int]] = []
    uid = base + 20_000
    for name, (n_ord, n_celeb) in CLASSES.items():
        readers[name] = []
        for _ in range(readers_per_class):
            uid += 1
            readers[name].append(uid)
            follows += [(uid, a) for a in rng.sample(ordinary, n_ord) + celebs[:n_celeb]]
    slots = asyncio.Semaphore(64)

    async def bounded(coro) -> None:  # type: ignore[no-untyped-def]
        async with slots:
            await coro
    await asyncio.gather(*(bounded(copies.add_follow(r, a, since, 1)) for r, a in follows))
    for c in celebs:
        await tiers.tier_for_post(c, 10**6)
    posts = make_posts(rng, ordinary, celebs, now)
    celeb_set = set(celebs)
    pushed = inbox_rows(follows, posts, celeb_set, now, s.inbox_cap)

    async def one(post: tuple[int, int, datetime, str]) -> None:
        post_id, author, at, text = post
        await copies.write_post(PostFields(post_id, author, at, text, [], 1, False), 1)
        await copies.add_author_post(author, post_id, 1)
        if author not in celeb_set:
            await copies.mark_fanned_out(post_id, True, 1)
            await inbox.push(pushed.get(post_id, []), post_id, author, 1)
    await asyncio.gather(*(bounded(one(p)) for p in posts))
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
        conn.execute("VACUUM ANALYZE")
    per_author: dict[int, int] = {}
    for p in posts:
        per_author[p[1]] = per_author.get(p[1], 0) + 1
    rows = sum(per_author[a] for r, a in follows if r == readers["large"][0])
    print(f"seeded {len(posts)} posts over {HISTORY_DAYS} days, {len(follows)} follows, "
          f"{sum(map(len, pushed.values()))} inbox rows; the pull query sorts {rows} rows "
          f"for one large reader")
    return readers


async def api_walks(base_url: str, s: Settings, readers: list[int], requests: int,
                    concurrency: int) -> tuple[list[float], list[float], float, int]:
    """Latencies of first and next pages, pages/s, and how many requests failed (any
    status but 200: a 503 is a store timeout on this shared machine; the walk goes on)."""
    secret = s.jwt_secret.get_secret_value()
    tokens = {r: mint_token(r, secret) for r in readers}
    first: list[float] = []
    nxt: list[float] = []
    errors = 0
    todo = list(range(requests))
    limits = httpx.Limits(max_connections=concurrency)
    async with httpx.AsyncClient(base_url=base_url, limits=limits, timeout=30) as client:
        async def get(params: dict[str, str], headers: dict[str, str], into: list[float]) -> dict | None:
            nonlocal errors
            t0 = time.perf_counter()
            response = await client.get("/v1/feed", headers=headers, params=params)
            if response.status_code != 200:
                errors += 1
                return None
            into.append(time.perf_counter() - t0)
            return response.json()

        async def worker() -> None:
            while todo:
                i = todo.pop()
                headers = {"Authorization": f"Bearer {tokens[readers[i % len(readers)]]}"}
                page = await get({}, headers, first)
                if page and page["next_cursor"]:
                    await get({"cursor": page["next_cursor"]}, headers, nxt)
        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - started
    return first, nxt, (len(first) + len(nxt)) / wall, errors


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
                  apis: list[Api]) -> None:
    pool = AsyncConnectionPool(s.pg_dsn, min_size=4, max_size=16, open=False)
    await pool.open(wait=True)
    levels = [int(c) for c in args.concurrency.split(",")]
    print(f"{'class':7} {'conc':>4} {'api':10} {'kind':5} {'first/next page':40} {'pages/s':>7} | "
          f"p95 / pull p95")
    try:
        for api in apis:  # warm every process (statements, users, caches) on every class
            for group in readers.values():
                await api_walks(api.url, s, group, 8 * len(group), 4)
        for name, group in readers.items():
            for conc in levels:
                results = [(api.name, *await api_walks(api.url, s, group, args.requests, conc))
                           for api in apis]
                pf, pn, prate = await pull_walks(pool, group, args.requests, conc)
                results.append(("pull-pg", pf, pn, prate, 0))
                for label, f, n, rate, errors in results:
                    for kind, a, b in (("first", f, pf), ("next", n, pn)):
                        ratio = pct(a, .95) / pct(b, .95) if b and a else float("nan")
                        failed = f"  {errors} failed" if errors and kind == "first" else ""
                        print(f"{name:7} {conc:4} {label:10} {kind:5} {summary(a):40} "
                              f"{rate:7.1f} | {ratio:5.2f}{failed}", flush=True)
    finally:
        await pool.close()


def parse_api(spec: str) -> Api:
    """``NAME=ROOT[:WORKERS]``."""
    name, _, rest = spec.partition("=")
    root, _, workers = rest.partition(":")
    return Api(name, Path(root or ROOT).resolve(), int(workers) if workers else None)


def start_api(api: Api, name: str) -> None:
    port = free_port()
    env = dict(os.environ, FEED_PG_DATABASE=name, FEED_CASSANDRA_KEYSPACE=name,
               FEED_API_PORT=str(port), FEED_TOPIC_PREFIX="feed", PYTHONPATH=str(api.root))
    if api.workers is not None:
        env["FEED_API_WORKERS"] = str(api.workers)
    api.process = subprocess.Popen([sys.executable, "-m", "services.api"], cwd=api.root, env=env,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    api.url = f"http://127.0.0.1:{port}"


def wait_ready(api: Api) -> None:
    deadline = time.monotonic() + 90
    while True:
        try:
            if httpx.get(api.url + "/readyz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline or (api.process and api.process.poll() is not None):
            raise RuntimeError(f"API {api.name} did not start")
        time.sleep(0.2)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--readers", type=int, default=12)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--concurrency", default="1,4,16")
    parser.add_argument("--api", action="append", default=[],
                        help="NAME=ROOT[:WORKERS]; repeat to compare builds in one run")
    args = parser.parse_args()
    apis = [parse_api(spec) for spec in args.api] or [Api("api", ROOT, None)]
    name = f"bench_feed_{secrets.token_hex(3)}"
    base = Settings()
    s = Settings(pg_database=name, cassandra_keyspace=name, topic_prefix="feed")
    with psycopg.connect(base.pg_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    try:
        migrate_postgres(s)
        migrate_cassandra(s, name)
        readers = asyncio.run(seed(s, args.readers, secrets.SystemRandom()))
        for api in apis:
            start_api(api, name)
        for api in apis:
            wait_ready(api)
        asyncio.run(measure(args, s, readers, apis))
    finally:
        for api in apis:
            if api.process is not None:
                api.process.terminate()
                api.process.wait(30)
        with psycopg.connect(base.pg_dsn, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        cl = cql.cluster(s, timeout=60)
        cl.connect().execute(f"DROP KEYSPACE IF EXISTS {name}")
        cl.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
