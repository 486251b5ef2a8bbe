"""A/B of our read path: two source trees of the API on one seeded dataset, runs interleaved.

    .venv/bin/python -m bench.read.ab --base HEAD [--rounds 4] [--duration 8]
        [--cells small,h30-f500] [--kinds first] [--connections 16] [--env FEED_X=VALUE]
        [--profile [--profile-gil]]
        [grid data options]

A change to the read path is worth a few per cent to a few tens; the machine's drift
between two grid runs (±20-30 %, docs/read-path.md) hides that. Here ``base`` (a git
revision, checked out into a temporary worktree) and the working tree run side by side
as two ``python -m services.api`` processes on one database and keyspace, and every
(cell, kind) is measured ``rounds`` times in ABBA order, so drift hits both alike. Each
run is wrk's (C) with the grid's warm-up; reported per side: median pages/s, median p95,
API CPU-ms per page and the stores' (Postgres and Cassandra, as measured); and the ratio
of the medians (working tree / base); then each side's snapshot, cache and failure
counters (``COUNTERS``).
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import urllib.request
from datetime import datetime, timezone
from pathlib import Path

from bench.read.grid import (PAGE_LIMIT, TOKEN_TTL_S, grid_args, grid_or_usage_error, next_entries,
                             profile_run, seeded_stores)
from bench.read.seed import log
from bench.harness.servers import ROOT, Server, Servers, stack_client_env, store_pids
from bench.harness.wrk_load import store_cpu_total, warm_and_run
from services.api.http.auth import mint_token

# Counters read from each side's /metrics at the end (summed over their labels but the
# ones named): what a change is meant to move besides throughput.
COUNTERS = ("feed_snapshots_built_total", "feed_snapshots_reused_total", "feed_snapshot_save_failures_total",
            "feed_cache_lookups_total", "feed_partition_read_failures_total",
            "feed_snapshot_write_seconds", "python_gc_pause_seconds", "feed_visibility_reads_total",
            "feed_items_skipped_total")


def counters(server: Server) -> dict[str, float]:
    """``COUNTERS`` from the server's /metrics, by metric name and labels."""
    with urllib.request.urlopen(server.url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith(COUNTERS):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def worktree(revision: str, into: Path) -> Path:
    """``revision`` checked out (detached) at ``into``; removed by ``drop_worktree``."""
    subprocess.run(["git", "worktree", "add", "--detach", str(into), revision], cwd=ROOT,
                   check=True, capture_output=True)
    return into


def base_topics(tree: Path, prefix: str) -> None:
    """The base's own topics under the run's prefix, by its own migrator: a base from
    before a topic was retired (``inbox-events``) waits for it in its readiness check.
    The run's clean-up deletes every topic under the prefix (``grid.drop_stores``)."""
    subprocess.run([sys.executable, "-m", "deploy.migrate", "--only", "kafka", "--topic-prefix", prefix],
                   cwd=tree, env=stack_client_env(), check=True, capture_output=True)


def drop_worktree(path: Path) -> None:
    subprocess.run(["git", "worktree", "remove", "--force", str(path)], cwd=ROOT, check=False,
                   capture_output=True)


def measure(server: Server, entries: list[tuple[str, str]], args: argparse.Namespace,
            stores: dict[str, int]) -> dict:
    r = warm_and_run(server.url, entries, args.connections, args.duration, args.warmup,
                     server.pid, stores)
    store_s = store_cpu_total(r.store_cpu_s)
    return {"pages_per_s": r.pages_per_s, "p95_ms": r.p95_ms,
            "cpu_ms_per_page": round(1000 * r.server_cpu_s / r.ok, 3) if r.ok else None,
            # Postgres and Cassandra together over the run, as measured: both sides share
            # the stores, and the runs take turns, so each run's store CPU is its own.
            "store_cpu_ms_per_page": round(1000 * store_s / r.ok, 3) if r.ok and store_s is not None else None,
            "non_2xx": r.non_2xx}


def summary(runs: list[dict]) -> dict:
    def med(key: str) -> float | None:
        values = [r[key] for r in runs if r[key] is not None]
        return round(statistics.median(values), 3) if values else None
    return {"runs": len(runs), "pages_per_s": med("pages_per_s"), "p95_ms": med("p95_ms"),
            "cpu_ms_per_page": med("cpu_ms_per_page"), "store_cpu_ms_per_page": med("store_cpu_ms_per_page"),
            "non_2xx": sum(r["non_2xx"] for r in runs)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    grid_args(parser)
    parser.set_defaults(histories="30", follows="500", skip="")
    parser.add_argument("--base", default="HEAD", help="git revision to compare against")
    parser.add_argument("--rounds", type=int, default=4, help="ABBA rounds per (cell, kind)")
    parser.add_argument("--duration", type=float, default=8.0)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--cells", default="small,h30-f500")
    parser.add_argument("--kinds", default="first", help="first,next")
    parser.add_argument("--env", action="append", default=[], metavar="FEED_X=VALUE",
                        help="a setting for both sides (repeatable), e.g. "
                             "FEED_SNAPSHOT_REUSE_S=0 to measure first pages that build")
    parser.add_argument("--out", default=str(ROOT / "bench" / "out" / "read-ab"))
    parser.add_argument("--profile", action="store_true",
                        help="after each (cell, kind)'s rounds, one unrecorded run per side under "
                             "py-spy (profiles/<side>-<cell>-<kind>.txt beside ab.json)")
    parser.add_argument("--profile-rate", type=int, default=200)
    parser.add_argument("--profile-gil", action="store_true",
                        help="sample only the thread holding the GIL (bench.read.grid's option)")
    args = parser.parse_args()
    both = dict(item.split("=", 1) for item in args.env)
    now = datetime.now(timezone.utc)
    graph = grid_or_usage_error(parser, args, now)
    cells = [c for c in graph.cells if c.name in args.cells.split(",")]
    out = Path(args.out)
    (out / "logs").mkdir(parents=True, exist_ok=True)
    results: dict[str, dict] = {}
    base_tree = Path(tempfile.mkdtemp(prefix="read-ab-")) / "base"
    worktree(args.base, base_tree)
    try:
        with seeded_stores(graph, now, args.serving_days, args.keep) as (s, name, _seeding):
            secret = s.jwt_secret.get_secret_value()
            tokens = {r: mint_token(r, secret, ttl_seconds=TOKEN_TTL_S) for c in cells for r in c.readers}
            env = {"FEED_JWT_SECRET": secret, "FEED_CURSOR_KEYS": s.cursor_keys.get_secret_value()}
            base_topics(base_tree, name)
            with Servers(name, out / "logs", env) as servers:
                sides = {"base": servers.start_ours("base", base_tree, both),
                         "work": servers.start_ours("work", env=both)}
                servers.wait_ready()
                for cell in cells:
                    for kind in args.kinds.split(","):
                        runs: dict[str, list[dict]] = {"base": [], "work": []}
                        entries = {side: ([(f"/v1/feed?limit={PAGE_LIMIT}", f"Bearer {tokens[r]}")
                                           for r in cell.readers] if kind == "first"
                                          else next_entries(server, cell, tokens))
                                   for side, server in sides.items()}
                        for i in range(args.rounds):
                            order = ("base", "work") if i % 2 == 0 else ("work", "base")
                            stores = store_pids()
                            for side in order:
                                run = measure(sides[side], entries[side], args, stores)
                                runs[side].append(run)
                                log(f"{cell.name:8} {kind:5} c{args.connections} {side:4} "
                                    f"{run['pages_per_s']:8.1f} pages/s p95 {run['p95_ms']} ms "
                                    f"cpu {run['cpu_ms_per_page']} ms/page, stores {run['store_cpu_ms_per_page']}")
                        if args.profile:
                            for side, server in sides.items():
                                profile_run(server, entries[side], args.connections, args,
                                            f"{side}-{cell.name}-{kind}")
                        a, b = summary(runs["base"]), summary(runs["work"])
                        ratio = (round(b["pages_per_s"] / a["pages_per_s"], 3)
                                 if a["pages_per_s"] and b["pages_per_s"] else None)
                        results[f"{cell.name}/{kind}"] = {"base": a, "work": b, "work_over_base": ratio}
                        log(f"{cell.name:8} {kind:5} base {a['pages_per_s']} work {b['pages_per_s']} "
                            f"pages/s (x{ratio}), p95 {a['p95_ms']} -> {b['p95_ms']} ms, "
                            f"cpu {a['cpu_ms_per_page']} -> {b['cpu_ms_per_page']} ms/page, "
                            f"stores {a['store_cpu_ms_per_page']} -> {b['store_cpu_ms_per_page']} ms/page")
                results["counters"] = {side: counters(server) for side, server in sides.items()}
                for side, values in results["counters"].items():
                    log(f"{side} counters: {values}")
    finally:
        drop_worktree(base_tree)
    meta = {"base": args.base, "env": both, "rounds": args.rounds, "duration_s": args.duration,
            "connections": args.connections, "started": now.isoformat(timespec="seconds")}
    (out / "ab.json").write_text(json.dumps({"meta": meta, "results": results}, indent=2))
    log(f"report: {out / 'ab.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
