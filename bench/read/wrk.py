"""``make bench``'s read phase: HTTP load from wrk (bench/harness/wrk_load.py, a C load generator
in its own process), against our API and against the strongest pull baseline, on the
bench's own database, for the same readers.

* **Ours**: the running API (``bench.harness.pipeline.Services``: as many uvicorn workers as the
  machine has cores). First pages (each reader's ranked walk), then next pages from the
  cursors of first pages fetched just before.
* **Pull**: ``bench.read.pull_service`` (FastAPI + psycopg on the same Postgres, the
  specified query as a LATERAL over covering indexes: the read grid's faster pull shape,
  docs/read-path.md), with the same number of workers, the same JWTs and page size,
  signed keyset cursors for its next pages.
* **/healthz** on our API: the empty endpoint, the HTTP stack's own ceiling.

Each run is warmed up (unrecorded), then measured: pages/s (2xx), latency p50/p95/p99
as wrk measured them, and the server's CPU-seconds per 1,000 pages (computed from
/proc over the run). Rows keep the shape the report reads (``group``, ``page``,
``concurrency``, ``per_s``, ``p50_ms`` ...).
"""
from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

from services.api.__main__ import usable_cores, worker_count
from services.api.http.auth import mint_token
from services.shared.clients import pg
from services.shared.settings import Settings

from .pull_service import create_baseline_indexes
from bench.harness.profiling import profile_wrk
from bench.harness.servers import Servers, store_pids
from bench.harness.wrk_load import WrkResult, warm_and_run

PAGE_LIMIT = 20
PULL_SHAPE = "lateral"
WARMUP_S = 2.0
TOKEN_TTL_S = 6 * 3600


def _page(url: str, token: str, cursor: str | None = None) -> dict[str, Any]:
    path = f"/v1/feed?limit={PAGE_LIMIT}" + (f"&cursor={cursor}" if cursor else "")
    req = urllib.request.Request(url + path, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        page: dict[str, Any] = json.load(resp)
        return page


def entries(url: str, tokens: dict[int, str], kind: str) -> list[tuple[str, str]]:
    """wrk's request list: each reader's first page, or its second page (a cursor from a
    first page fetched now; readers with one page only are left out)."""
    if kind == "first":
        return [(f"/v1/feed?limit={PAGE_LIMIT}", f"Bearer {t}") for t in tokens.values()]
    out = []
    for token in tokens.values():
        cursor = _page(url, token).get("next_cursor")
        if cursor:
            out.append((f"/v1/feed?limit={PAGE_LIMIT}&cursor={cursor}", f"Bearer {token}"))
    return out


def row(r: WrkResult, **labels: Any) -> dict[str, Any]:
    return {**labels, "concurrency": r.connections, "requests": r.requests,
            "errors": r.non_2xx + r.socket_errors, "per_s": r.pages_per_s,
            "p50_ms": r.p50_ms, "p95_ms": r.p95_ms, "p99_ms": r.p99_ms,
            "server_cpu_s": r.server_cpu_s,
            "server CPU-s per 1,000 pages (computed)":
                round(r.server_cpu_s / r.ok * 1000, 2) if r.ok else None,
            # The stores' CPU over this run, and their CPU/s in the second before it with no
            # load from us (bench/harness/wrk_load.py): what a page costs them, net of the rest.
            "ok": r.ok, "duration_s": r.duration_s, "store_cpu_s": r.store_cpu_s,
            "store_idle_cpu_per_s": r.store_idle_cpu_per_s,
            "statuses": r.statuses, "load generator": "wrk"}


def reads(settings: Settings, api_url: str, api_pid: int, groups: dict[str, list[int]],
          avg_follows: dict[str, float], levels: list[int], seconds: float,
          log_dir: Path, profiles: Path | None = None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(our rows, baseline rows) for every group, page kind and connection count.
    ``profiles``: after each of our runs at the most connections, one more (unrecorded)
    under py-spy, its collapsed stacks in that directory (``{group}-{kind}-c{n}.txt``)."""
    secret = settings.jwt_secret.get_secret_value()
    tokens = {g: {u: mint_token(u, secret, ttl_seconds=TOKEN_TTL_S) for u in users}
              for g, users in groups.items() if users}
    with pg.connect(settings, autocommit=True) as conn:
        create_baseline_indexes(conn)
    secrets_env = {"FEED_JWT_SECRET": secret,
                   "FEED_CURSOR_KEYS": settings.cursor_keys.get_secret_value()}
    ours_rows: list[dict[str, Any]] = []
    base_rows: list[dict[str, Any]] = []
    workers = worker_count(settings.api_workers, usable_cores())
    with Servers(settings.pg_database, log_dir, secrets_env, workers) as servers:
        pull = servers.start_pull(PULL_SHAPE)
        servers.wait_ready()
        stores = store_pids()
        for level in levels:
            for group, by_user in tokens.items():
                for kind in ("first", "next"):
                    reqs = entries(api_url, by_user, kind)
                    if reqs:
                        r = warm_and_run(api_url, reqs, level, seconds, WARMUP_S, api_pid, stores)
                        ours_rows.append(row(r, group=group, avg_follows=avg_follows[group], page=kind))
                        if profiles is not None and level == max(levels):
                            profile_wrk(api_url, api_pid, reqs, level, seconds,
                                        profiles / f"{group}-{kind}-c{level}.txt")
                    if group == "large":
                        theirs = entries(pull.url, by_user, kind)
                        if theirs:
                            r = warm_and_run(pull.url, theirs, level, seconds, WARMUP_S,
                                             pull.pid, stores)
                            base_rows.append(row(r, name=f"pull from Postgres (the specified query, "
                                                         f"{PULL_SHAPE}, {workers} workers), "
                                                         f"large readers, {kind} pages",
                                                 page=kind))
            r = warm_and_run(api_url, [("/healthz", "")], level, seconds, WARMUP_S, api_pid, stores)
            base_rows.append(row(r, name="noop HTTP endpoint (/healthz, ours)", page="healthz"))
    return ours_rows, base_rows
