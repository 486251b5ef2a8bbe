"""Write-path benchmark: Snowflake ids per second, and POST /v1/posts throughput and p95.

    .venv/bin/python bench/write/api.py [--requests 2000] [--concurrency 1,8,32]
                                        [--base-url http://127.0.0.1:8080]

Without ``--base-url`` it creates a scratch database, migrates it, serves the API from
it in a subprocess (``python -m services.api``), measures, and drops everything again.
Figures are for this machine and whatever else runs on it; compare ratios, not absolutes.
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
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import bench  # noqa: E402,F401 - sets FEED_DEV_MODE when run as a script
from services.api.http.auth import mint_token  # noqa: E402
from services.api.write.idgen import SnowflakeGenerator  # noqa: E402
from services.shared.clients import pg  # noqa: E402
from services.shared.domain import ids  # noqa: E402
from services.shared.settings import Settings  # noqa: E402

CEILING_IDS_PER_SECOND = (ids.MAX_SEQUENCE + 1) * 1000  # 4,096,000 per node


class _HeldLease:
    """A lease that is always held but costs the same check as the real one."""

    def __init__(self) -> None:
        self._valid_until = time.monotonic() + 3600

    def is_held(self) -> bool:
        return time.monotonic() < self._valid_until


def bench_ids(seconds: float = 2.0) -> tuple[int, float]:
    gen = SnowflakeGenerator(1, lease=_HeldLease())
    issued, started = 0, time.perf_counter()
    deadline = started + seconds
    while time.perf_counter() < deadline:
        for _ in range(10_000):
            gen.next_id()
        issued += 10_000
    return issued, time.perf_counter() - started


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def scratch_api() -> Iterator[str]:
    """A migrated scratch database and the API serving it; both gone afterwards."""
    from deploy.migrate import migrate_postgres

    base = Settings()
    name = f"bench_api_{secrets.token_hex(4)}"
    with pg.connect(base, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    port = _free_port()
    server = None
    try:
        migrate_postgres(Settings(pg_database=name))
        env = {**os.environ, "FEED_PG_DATABASE": name, "FEED_API_PORT": str(port),
               "PYTHONPATH": str(ROOT)}
        server = subprocess.Popen([sys.executable, "-m", "services.api"], cwd=ROOT, env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(url + "/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or server.poll() is not None:
                raise RuntimeError("the API did not become ready")
            time.sleep(0.1)
        yield url
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
        with pg.connect(base, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


async def bench_posts(url: str, secret: str, requests: int,
                      concurrency: int) -> tuple[float, float, float, int]:
    """(requests/s, p50 ms, p95 ms, non-201 count) for ``requests`` posts."""
    tokens = [mint_token(secrets.randbelow(1 << 62) + 1, secret) for _ in range(64)]
    latencies: list[float] = []
    failures = 0
    counter = iter(range(requests))
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, timeout=30, limits=limits) as client:
        for i in range(min(64, requests)):  # warm-up: users created, connections open
            await client.post("/v1/posts", json={"text": "warm"},
                              headers={"Authorization": f"Bearer {tokens[i]}",
                                       "Idempotency-Key": secrets.token_hex(12)})

        async def worker() -> None:
            nonlocal failures
            for i in counter:
                headers = {"Authorization": f"Bearer {tokens[i % len(tokens)]}",
                           "Idempotency-Key": secrets.token_hex(12)}
                started = time.perf_counter()
                response = await client.post("/v1/posts", headers=headers,
                                             json={"text": f"bench post {i}", "media_ids": []})
                latencies.append(time.perf_counter() - started)
                failures += response.status_code != 201

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    latencies.sort()
    p95 = latencies[max(0, int(len(latencies) * 0.95) - 1)]
    return requests / elapsed, statistics.median(latencies) * 1000, p95 * 1000, failures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", default="1,8,32")
    parser.add_argument("--base-url", help="an API already running (with FEED_JWT_SECRET)")
    args = parser.parse_args()

    issued, elapsed = bench_ids()
    rate = issued / elapsed
    print(f"ids: {rate:,.0f} ids/s on one thread "
          f"({rate / CEILING_IDS_PER_SECOND:.1%} of the {CEILING_IDS_PER_SECOND:,}/s ceiling)")

    secret = Settings().jwt_secret.get_secret_value()
    levels = [int(c) for c in args.concurrency.split(",")]

    def run(url: str) -> None:
        for concurrency in levels:
            rps, p50, p95, failures = asyncio.run(
                bench_posts(url, secret, args.requests, concurrency))
            print(f"POST /v1/posts concurrency {concurrency:>3}: {rps:,.0f} req/s, "
                  f"p50 {p50:.1f} ms, p95 {p95:.1f} ms, non-201: {failures}")

    if args.base_url:
        run(args.base_url)
    else:
        with scratch_api() as url:
            run(url)


if __name__ == "__main__":
    main()
