"""Read benchmark grid: our feed API against the strongest plain pull service, over HTTP
with wrk, on one freshly seeded database and keyspace (both dropped at the end).

    .venv/bin/python -m bench.read.grid [--duration 10] [--warmup 2]
        [--histories 1,7,30,90] [--follows 10,100,500,2000] [--skip 90x2000]
        [--readers 20] [--pull lateral,join] [--serving-days 2] [--workers 1]
        [--c64-cells small,h30-f500] [--out bench/out/read-grid] [--keep] [--profile]
        [--no-rebuild]

(``make bench-read BENCH_READ_ARGS="..."``). Data: ``bench.read.graph`` (an author pool
per history length, cells of readers, the demo graph as the ``small`` cell), loaded by
``bench.read.seed``. Services: ``bench.harness.servers`` (ours = ``python -m services.api``;
pull = ``bench.read.pull_service``, one process per query shape; 1 worker each by default;
``ours-rebuild`` = ours with snapshot reuse off, first pages only; ``--no-rebuild``).

Order: ``/healthz`` of every service at 16 connections (the "empty endpoint"); then for
every cell, page kind (first; next = the second page, from a cursor fetched per reader
just before) and connection count (1, 16), each service in turn (interleaved, so drift
in the shared machine's load hits all alike): a warm-up run, a second of the stores'
background CPU, the measured run; then ours at 64 connections on ``--c64-cells``; then
``/healthz`` again. Before its runs, every reader's first page from each service is
checked: no post of a blocked author, none from before ``following_since`` or from an
author not followed, and the share of ours that pull also shows (the same order by
construction: every seeded post has the same score). Results: ``bench.read.report``.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import secrets
import sys
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

from bench.read.graph import Cell, ReadGraph, add_small_cell, make_grid
from bench.read.report import REBUILD, write_report
from bench.read.seed import log, seed_all
from bench.harness.pipeline import drop_database_and_keyspace
from bench.harness.servers import Server, Servers, store_pids
from deploy.workload import GraphSpec, generate
from bench.harness.profiling import profile_wrk, top_frames
from bench.harness.wrk_load import WrkResult, warm_and_run
from deploy.migrate import migrate_cassandra, migrate_kafka, migrate_postgres
from services.api.http.auth import mint_token
from services.shared.clients import kafka, pg
from services.shared.contracts.topics import all_topics
from services.shared.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
PAGE_LIMIT = 20       # the specified page size, both services
CONNECTIONS = (1, 16)
# A page fetched to check it or to get a cursor is retried this often when shed (503).
FETCH_ATTEMPTS = 5
# How long cleanup waits for a store that another engineer's test is restarting.
DROP_DEADLINE_S = 120
# Tokens outlive the longest run (a full grid is well under this).
TOKEN_TTL_S = 24 * 3600
# Serving copies for the last 2 days: the author-timeline buckets the read path merges
# (today and yesterday); inbox posts are written whatever their age.
DEFAULT_SERVING_DAYS = 2


def fetch_page(url: str, token: str, cursor: str | None = None) -> dict:
    """One page; a 503 (shed, Retry-After) is retried a few times."""
    query = f"/v1/feed?limit={PAGE_LIMIT}" + (f"&cursor={cursor}" if cursor else "")
    req = urllib.request.Request(url + query, headers={"Authorization": f"Bearer {token}"})
    for attempt in range(FETCH_ATTEMPTS):
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            if exc.code != 503 or attempt == FETCH_ATTEMPTS - 1:
                raise
            time.sleep(float(exc.headers.get("Retry-After") or 1))
    raise AssertionError("unreachable")


def check_first_pages(cell: Cell, pages: dict[str, dict[int, dict]]) -> dict[str, object]:
    """Rule violations per service and the share of ours that pull also shows (computed)."""
    blocked = {(a, b) for a, b in cell.blocks} | {(b, a) for a, b in cell.blocks}
    out: dict[str, object] = {}
    for name, by_reader in pages.items():
        bad = 0
        for reader, page in by_reader.items():
            for item in page["items"]:
                author = int(item["author_id"])
                since = cell.following[reader].get(author)
                at = datetime.fromisoformat(item["created_at"].replace("Z", "+00:00"))
                if since is None or (reader, author) in blocked or at < since:
                    bad += 1
        out[f"violations_{name}"] = bad
    pull = next((n for n in pages if n.startswith("pull")), None)
    if "ours" in pages and pull:
        same = total = 0
        for reader, page in pages["ours"].items():
            theirs = {i["post_id"] for i in pages[pull][reader]["items"]}
            same += sum(i["post_id"] in theirs for i in page["items"])
            total += len(theirs)
        out["first_page_overlap"] = round(same / total, 3) if total else None
    return out


def next_entries(server: Server, cell: Cell, tokens: dict[int, str]) -> list[tuple[str, str]]:
    """Each reader's second page: a cursor from a first page fetched now (readers whose
    feed has one page only are left out)."""
    out = []
    for reader in cell.readers:
        cursor = fetch_page(server.url, tokens[reader]).get("next_cursor")
        if cursor:
            out.append((f"/v1/feed?limit={PAGE_LIMIT}&cursor={cursor}", f"Bearer {tokens[reader]}"))
    return out


def measure_cell(cell: Cell, services: list[Server], tokens: dict[int, str], args: argparse.Namespace,
                 conns: tuple[int, ...]) -> tuple[list[dict], dict]:
    """Every (kind, connections, service) run of one cell, services interleaved."""
    rows: list[dict] = []
    stores = store_pids()  # again per cell: a test elsewhere may have restarted a store
    first = [(f"/v1/feed?limit={PAGE_LIMIT}", f"Bearer {tokens[r]}") for r in cell.readers]
    pages = {s.name: {r: fetch_page(s.url, tokens[r]) for r in cell.readers} for s in services}
    checks = check_first_pages(cell, pages)
    nxt: dict[str, list[tuple[str, str]]] = {}
    for kind in ("first", "next"):
        for c in conns:
            for server in services:
                if kind == "next" and server.name == REBUILD:
                    continue  # its next pages are ours': only first pages differ
                if kind == "next" and server.name not in nxt:
                    nxt[server.name] = next_entries(server, cell, tokens)
                    checks[f"next_page_readers_{server.name}"] = len(nxt[server.name])
                entries = first if kind == "first" else nxt[server.name]
                if not entries:
                    continue
                result = warm_and_run(server.url, entries, c, args.duration, args.warmup,
                                      server.pid, stores)
                rows.append(row(cell.name, server.name, kind, result, cell))
                if args.profile and server.name in ("ours", REBUILD) and c == max(conns):
                    profile_run(server, entries, c, args, f"{cell.name}-{server.name}-{kind}-c{c}")
    return rows, checks


def profile_run(server: Server, entries: list[tuple[str, str]], connections: int,
                args: argparse.Namespace, label: str) -> None:
    """One more run of the same load under py-spy (``profiling.profile_wrk``): a
    collapsed-stack file per run in profiles/ beside the report, its top frames logged."""
    out = Path(args.out) / "profiles" / f"{label}.txt"
    profile_wrk(server.url, server.pid, entries, connections, args.duration, out,
                rate=args.profile_rate, gil=args.profile_gil)
    if out.exists():
        for share, frame in top_frames(out)[:12]:
            log(f"  profile {label}: {share:5.1%} {frame}")


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def row(cell: str, service: str, kind: str, r: WrkResult, c: Cell | None = None) -> dict:
    """One run as a report row, logged as it lands."""
    log(f"{cell:10} {kind:7} c{r.connections:<3} {service:12} {r.pages_per_s:8.1f} pages/s "
        f"p50/95/99 {'/'.join(_ms(v) for v in (r.p50_ms, r.p95_ms, r.p99_ms))} ms "
        f"non-2xx {r.non_2xx} "
        f"{r.statuses or ''}")
    return {"cell": cell, "history_days": c.history_days if c else None,
            "follows": c.follows if c else None, "service": service, "kind": kind, **r.as_dict()}


def measure_health(servers: list[Server], args: argparse.Namespace, when: str) -> list[dict]:
    """``/healthz`` of each service at 16 connections: the empty endpoint on that server."""
    stores = store_pids()
    return [row(f"healthz-{when}", server.name, "healthz",
                warm_and_run(server.url, [("/healthz", "")], 16, args.duration, args.warmup,
                             server.pid, stores)) for server in servers]


def run(args: argparse.Namespace, s: Settings, graph: ReadGraph, seeding: dict, name: str) -> Path:
    """Start the services, measure every cell, and write the report (also after a failure,
    with the runs done so far)."""
    secret = s.jwt_secret.get_secret_value()
    readers = [r for c in graph.cells for r in c.readers]
    tokens = {r: mint_token(r, secret, ttl_seconds=TOKEN_TTL_S) for r in readers}
    out = Path(args.out)
    (out / "logs").mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    checks: dict[str, dict] = {}
    report = out / "report.md"
    meta = {"started": args.started, "duration_s": args.duration, "warmup_s": args.warmup,
            "seeding": seeding, "pull_shapes": args.pull.split(","),
            "cells": {c.name: {"readers": len(c.readers), "follows": c.follows,
                               "history_days": c.history_days} for c in graph.cells},
            "skipped": args.skip, "checks": checks, "machine_cores": os.cpu_count(),
            "workers": args.workers}
    try:
        secrets_env = {"FEED_JWT_SECRET": s.jwt_secret.get_secret_value(),
                       "FEED_CURSOR_KEYS": s.cursor_keys.get_secret_value()}
        with Servers(name, out / "logs", secrets_env, args.workers) as servers:
            ours = servers.start_ours()
            rebuild = ([servers.start_ours(REBUILD, env={"FEED_SNAPSHOT_REUSE_S": "0"})]
                       if args.rebuild else [])
            pulls = [servers.start_pull(shape) for shape in args.pull.split(",")]
            servers.wait_ready()
            rows += measure_health([ours, *pulls], args, "start")
            order = sorted(graph.cells, key=lambda c: (c.name != "small", c.history_days, c.follows))
            for cell in order:
                cell_rows, checks[cell.name] = measure_cell(cell, [ours, *rebuild, *pulls], tokens,
                                                            args, CONNECTIONS)
                rows += cell_rows
            for cell in (c for c in order if c.name in args.c64_cells.split(",")):
                rows += measure_cell(cell, [ours], tokens, args, (64,))[0]
            rows += measure_health([ours, *pulls], args, "end")
    finally:
        if rows:
            write_report(out, rows, meta)
    return report


def grid_or_usage_error(parser: argparse.ArgumentParser, args: argparse.Namespace, now: datetime) -> ReadGraph:
    """``grid_of``, with bad cell options ("--skip none", "--follows ten") answered as a
    usage error that says which, not a traceback (``bench.read.grid`` and ``bench.read.ab``)."""
    try:
        return grid_of(args, now)
    except ValueError as exc:
        parser.error(f"--histories, --follows and --skip take numbers (--skip 90x2000,30x500; "
                     f"--skip= for none): {exc}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per measured run")
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds of warm-up per run")
    grid_args(parser)
    parser.add_argument("--pull", default="lateral,join", help="pull query shapes to run")
    parser.add_argument("--c64-cells", default="small,h30-f500")
    parser.add_argument("--no-rebuild", dest="rebuild", action="store_false",
                        help=f"leave out {REBUILD}: ours with snapshot reuse off, so that "
                             "every first page builds and stores a snapshot")
    parser.add_argument("--workers", type=int, default=1,
                        help="server processes of each service (the same for both)")
    parser.add_argument("--out", default=str(ROOT / "bench" / "out" / "read-grid"))
    parser.add_argument("--profile", action="store_true",
                        help="after ours' runs at the most connections, one unrecorded run "
                             "under py-spy (profiles/ beside the report)")
    parser.add_argument("--profile-rate", type=int, default=200,
                        help="py-spy samples per second (more: a finer profile, more of the "
                             "server's CPU taken by the sampler)")
    parser.add_argument("--profile-gil", action="store_true",
                        help="sample only the thread holding the GIL: where the Python work "
                             "goes, without threads that wait for the GIL or idle in C (the "
                             "driver's reactor, thread pools) counted as busy")
    args = parser.parse_args()
    args.started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    now = datetime.now(timezone.utc)
    graph = grid_or_usage_error(parser, args, now)
    log(f"graph: {len(graph.cells)} cells, {len(graph.users)} users, {len(graph.posts())} posts")
    with seeded_stores(graph, now, args.serving_days, args.keep) as (s, name, seeding):
        report = run(args, s, graph, seeding, name)
        log(f"report: {report}")
    return 0


def grid_args(parser: argparse.ArgumentParser) -> None:
    """The data options (shared with bench.read.ab)."""
    parser.add_argument("--histories", default="1,7,30,90")
    parser.add_argument("--follows", default="10,100,500,2000")
    parser.add_argument("--skip", default="90x2000", help="HISTORYxFOLLOWS cells to leave out")
    parser.add_argument("--readers", type=int, default=20, help="readers per cell (at most)")
    parser.add_argument("--serving-days", type=int, default=DEFAULT_SERVING_DAYS,
                        help="days of post copies in Cassandra (0: the whole history)")
    parser.add_argument("--no-small", action="store_true", help="leave out the demo-graph cell")
    parser.add_argument("--keep", action="store_true", help="keep the database and keyspace")


def grid_of(args: argparse.Namespace, now: datetime) -> ReadGraph:
    skip = {tuple(int(x) for x in cell.split("x")) for cell in args.skip.split(",") if cell}
    rng = random.Random(7)
    graph = make_grid([int(h) for h in args.histories.split(",")],
                      [int(f) for f in args.follows.split(",")], skip, args.readers, now, rng)
    if not args.no_small:
        add_small_cell(graph, generate(GraphSpec.demo(), now), rng)
    return graph


@contextmanager
def seeded_stores(graph: ReadGraph, now: datetime, serving_days: int,
                  keep: bool) -> Iterator[tuple[Settings, str, dict]]:
    """A fresh database, keyspace and topics named alike, seeded with ``graph``; dropped
    on the way out unless ``keep``. Yields the run's settings (with its own signing
    secrets, never the built-in development ones), the name and the seeding figures."""
    name = f"bench_read_{secrets.token_hex(3)}"
    base = Settings()
    s = Settings(pg_database=name, cassandra_keyspace=name, topic_prefix=name,
                 jwt_secret=secrets.token_urlsafe(48),
                 cursor_keys=f"bench:{secrets.token_urlsafe(48)}")
    with pg.connect(base, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    try:
        migrate_postgres(s)
        migrate_cassandra(s, name)
        migrate_kafka(s, name)  # our API's stream consumer reads only the bench's topics
        t0 = time.monotonic()
        seeding = seed_all(s, graph, now, serving_days)
        log(f"seeded in {time.monotonic() - t0:.0f} s: {seeding}")
        yield s, name, seeding
    finally:
        if not keep:
            drop_stores(base, name)


def drop_stores(base: Settings, name: str) -> None:
    """Drop the bench's database, keyspace and topics, waiting out a store restart by a test."""
    deadline = time.monotonic() + DROP_DEADLINE_S
    admin = kafka.admin(base)
    # Every topic under the run's prefix: the working tree's, and any a base tree of an
    # A/B created that the working tree no longer knows (bench/read/ab.py).
    under = {t for t in admin.list_topics(timeout=30).topics if t.startswith(f"{name}.")}
    for future in admin.delete_topics(sorted(under | {t.name for t in all_topics(name)}),
                                      operation_timeout=30).values():
        try:
            future.result()
        except Exception as exc:  # noqa: BLE001 - a topic never created, or Kafka busy
            log(f"topic not deleted: {exc}")
    while True:
        try:
            drop_database_and_keyspace(base, name, name, timeout=60)
            return
        except Exception as exc:  # noqa: BLE001 - any store error: retry until the deadline
            if time.monotonic() > deadline:
                log(f"could not drop {name}: {exc}; drop it by hand")
                return
            time.sleep(2)


if __name__ == "__main__":
    sys.exit(main())
