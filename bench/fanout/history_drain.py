"""A month of history bulk-loaded, as a new user would: how long the fan-out takes to
reach lag 0.

    .venv/bin/python -m bench.fanout.history_drain [--authors 500] [--followers 100]
        [--posts-per-day 5] [--days 30] [--worker-root DIR] [--fanout-workers N] [--with-api]
        [--profile FILE] [--out FILE.json]

On its own database, keyspace and topics (``bench_history``, dropped and made again at
the start), against the running stack (``make up``):

1. ``authors`` authors, each followed by ``followers`` readers drawn from a pool (each
   reader follows about 8 of them), COPYed into Postgres with ``following_since`` 60 days
   back; the relay, the fan-out and the ranker take them in (lag 0);
2. ``authors × posts-per-day × days`` posts, their times spread at random over the last
   ``days`` days, COPYed in one transaction; timed from the COPY's start to the
   pipeline's lag 0 (every post's CDC record produced and consumed). Only the posts of
   the last 7 days get inbox rows (the inbox TTL), so this times a backlog in which most
   posts cost their per-post steps and no rows.

``--worker-root`` runs the fan-out from another checkout (a baseline commit, as
``bench/fanout/rows.py``). ``--fanout-workers N`` runs N fan-out processes in one consumer
group (the topics have 3 partitions: at most 3 do work), as a deployment scales the role;
their CPU is reported summed, as ``fanout CPU-s``. ``--with-api`` also runs the API (one process per core, from
the same checkout), as ``make run`` does and as the drain was first measured: before
2026-12-04 every API process read one ``inbox-events`` record per inbox row. ``--profile``
samples the fan-out worker with py-spy over the drain (bench/harness/profiling.py). Prints and writes the drain time, the rows written, rows/s and
posts/s over it, each component's CPU (bench/harness/costs.py), and a timeline of
one sample a second: the relay's WAL backlog, the fan-out's lag, the rows so far.
"""
from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

from bench.harness.costs import CostMeter
from bench.harness.pipeline import Sampler, Services, bench_settings, fresh_stores, shut_down, topic_sizes, wait_caught_up
from bench.harness.profiling import profiler, stop_profiler
from deploy.stack.workers import instances
from deploy.workload import _copy
from services.shared.clients import pg
from services.shared.domain import ids

REPO = Path(__file__).resolve().parents[2]


def log(msg: str) -> None:
    print(f"[history-drain {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.fanout.history_drain", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--authors", type=int, default=500)
    ap.add_argument("--followers", type=int, default=100)
    ap.add_argument("--posts-per-day", type=int, default=5)
    ap.add_argument("--days", type=int, default=30)
    ap.add_argument("--worker-root", type=Path, default=REPO)
    ap.add_argument("--fanout-workers", type=int, default=1)
    ap.add_argument("--with-api", action="store_true")
    ap.add_argument("--profile", type=Path, help="py-spy samples of the fan-out worker over the drain")
    ap.add_argument("--timeout-s", type=float, default=3600)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)

    settings = bench_settings("bench_history")
    log("fresh database, keyspace and topics")
    fresh_stores(settings)
    rng = random.Random(38)
    authors = list(range(1_000_000, 1_000_000 + args.authors))
    pool = list(range(2_000_000, 2_000_000 + max(args.followers, args.authors * args.followers // 8)))
    follows = [(r, a) for a in authors for r in rng.sample(pool, args.followers)]
    now = datetime.now(timezone.utc)
    posts = []
    for seq in range(args.authors * args.posts_per_day * args.days):
        created = now - timedelta(milliseconds=rng.randrange(60_000, args.days * 86_400_000))
        post_id = ids.lowest_id_at(int(created.timestamp() * 1000)) | (ids.MAX_NODE << ids.NODE_SHIFT) \
            | (seq & ids.MAX_SEQUENCE)
        posts.append((post_id, authors[seq % len(authors)], created))
    recent = sum(1 for _p, _a, c in posts if now - c < timedelta(days=7))

    services = Services(settings, REPO / "bench" / "out" / "history-drain-logs")
    # The fan-out's processes, named and on the ports `make run` gives them (deploy/stack/workers.py).
    fanouts = [i for i in instances(settings, {"fanout": max(1, args.fanout_workers)}) if i.role == "fanout"]
    sampler = Sampler(settings, fanout_ports=[i.port for i in fanouts])
    result: dict = {"authors": args.authors, "followers each": args.followers, "posts": len(posts),
                    "posts within the inbox TTL (7 days)": recent, "worker root": str(args.worker_root),
                    "fan-out workers": len(fanouts), "api running": args.with_api}
    try:
        if args.worker_root.resolve() != REPO:
            # The baseline worker's own topics too (before 2026-12-04 it also wrote
            # inbox-events, which this tree's migration no longer creates).
            subprocess.run([sys.executable, "-c", "from deploy.migrate import migrate_kafka; "
                            "from services.shared.settings import Settings; "
                            f"migrate_kafka(Settings(topic_prefix={settings.topic_prefix!r}), "
                            f"{settings.topic_prefix!r})"], cwd=args.worker_root, check=True)
        services.start("cdc")
        for fanout in fanouts:
            services.start(fanout.name, root=args.worker_root, instance=fanout)
        services.start("ranker")
        if args.with_api:
            services.start("api", root=args.worker_root)
        sampler.start()
        with pg.connect(settings) as conn:
            before = topic_sizes(settings, ["follows", "posts"])
            since = (now - timedelta(days=60)).isoformat()
            with conn.transaction():
                _copy(conn, "COPY users (user_id) FROM STDIN", ((str(u),) for u in [*authors, *pool]))
                _copy(conn, "COPY follows (follower_id, followed_id, following_since) FROM STDIN",
                      ((str(r), str(a), since) for r, a in follows))
            wait_caught_up(sampler, {"follows": before["follows"] + len(follows)}, timeout=args.timeout_s,
                           before=before, label="follows")
            log(f"{len(follows):,} follows taken in; loading {len(posts):,} posts ({recent:,} within 7 days)")
            rows_before = sampler.inbox_rows()
            meter = CostMeter(settings, {n: p.pid for n, p in services.procs.items()}).start()
            spy = profiler(services.procs["fanout"].pid, args.profile) if args.profile else None
            t = time.monotonic()
            t_copy = t - sampler.t0
            try:
                with conn.transaction():
                    _copy(conn, "COPY posts (post_id, author_id, created_at, text) FROM STDIN",
                          ((str(p), str(a), c.isoformat(), f"post {p}") for p, a, c in posts))
                wait_caught_up(sampler, {"posts": before["posts"] + len(posts)}, timeout=args.timeout_s,
                               before=before, label="posts")
                drain_s = time.monotonic() - t
            finally:
                stop_profiler(spy)
            cpu = meter.stop()
            if len(fanouts) > 1:  # one figure for the role, its processes summed
                cpu["fanout CPU-s"] = round(sum(cpu.pop(f"{i.name} CPU-s") for i in fanouts), 2)
        rows = sampler.inbox_rows() - rows_before
        result.update({"drain s (COPY to lag 0)": round(drain_s, 1), "inbox rows written": int(rows),
                       "inbox rows/s over the drain (computed)": round(rows / drain_s),
                       "posts/s over the drain (computed)": round(len(posts) / drain_s),
                       "cpu": cpu,
                       # One sample a second from the COPY on: where the drain's time went
                       # (the relay's WAL backlog, the fan-out's lag, its rows so far).
                       "timeline (s, relay WAL bytes behind, fan-out lag, inbox rows)": [
                           [round(x.t - t_copy, 1), x.cdc_lag_bytes, x.fanout_lag, int(x.inbox_rows - rows_before)]
                           for x in sampler.samples if x.t >= t_copy - 1 and x.inbox_rows == x.inbox_rows]})
    finally:
        shut_down(sampler, services, settings)
    log(json.dumps(result, indent=1))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
