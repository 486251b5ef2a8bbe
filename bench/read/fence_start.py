"""An API process started over a large visibility log: time to ready, memory, pages after.

    .venv/bin/python -m bench.read.fence_start [--entries 1000000] [--pages 2000]
        [--max-entries 2000000,500000]

For each bound in ``--max-entries`` (``FEED_VISIBILITY_MAX_ENTRIES``), one API process
(``python -m services.api``, one worker) is started on a fresh database whose
``visibility_changes`` holds ``--entries`` post entries (a moderation sweep's shape: the
cheapest kind per entry, the commonest in bulk), and once more over an empty log as the
baseline. Reported per run: seconds from spawn to ``/readyz`` 200, the process's RSS at
ready and its difference from the empty-log run (computed, per entry), the entries it
holds and whether it is in window mode, then ``--pages`` first pages of distinct new
readers fetched one after another with their status codes (every one must be 2xx).
"""
from __future__ import annotations

import argparse
import json
import time
import urllib.request
from datetime import datetime, timezone
from pathlib import Path

import httpx

from bench.harness.pipeline import bench_settings, fresh_stores
from bench.harness.servers import ROOT, Server, Servers
from bench.read.seed import log
from services.api.http.auth import mint_token
from services.shared.clients import pg
from services.shared.settings import Settings


def fill_log(settings: Settings, entries: int) -> None:
    """``entries`` post entries, numbered as the triggers number them."""
    with pg.connect(settings, autocommit=True) as conn:
        conn.execute("TRUNCATE visibility_changes")
        for start in range(0, entries, 200_000):
            conn.execute("INSERT INTO visibility_changes (seq, kind, subject_id, object_id, hidden) "
                         "SELECT nextval('visibility_changes_seq'), 'post', (1::bigint << 55) + g, "
                         "1, true FROM generate_series(%s, %s) g",
                         (start + 1, min(entries, start + 200_000)))


def rss_mb(server: Server) -> float:
    for line in Path(f"/proc/{server.process.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def gauge(server: Server, name: str) -> float | None:
    with urllib.request.urlopen(server.url + "/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    return None


def one_run(settings: Settings, servers: Servers, name: str, bound: int, pages: int,
            first_reader: int) -> dict[str, object]:
    spawned = time.monotonic()
    server = servers.start_ours(name, env={"FEED_VISIBILITY_MAX_ENTRIES": str(bound)})
    servers.wait_ready()
    ready_s = time.monotonic() - spawned
    result: dict[str, object] = {
        "bound": bound, "ready_s": round(ready_s, 2), "rss_mb_at_ready": round(rss_mb(server), 1),
        "entries_held": gauge(server, "feed_visibility_entries"),
        "window_mode": gauge(server, "feed_visibility_window_mode")}
    secret = settings.jwt_secret.get_secret_value()
    statuses: dict[str, int] = {}
    started = time.monotonic()
    with httpx.Client(base_url=server.url, timeout=10) as client:
        for reader in range(first_reader, first_reader + pages):
            token = mint_token(reader, secret, ttl_seconds=600)
            code = str(client.get("/v1/feed?limit=20", headers={"Authorization": f"Bearer {token}"})
                       .status_code)
            statuses[code] = statuses.get(code, 0) + 1
    result.update(pages=statuses, non_2xx=sum(n for c, n in statuses.items() if not c.startswith("2")),
                  pages_s=round(time.monotonic() - started, 1),
                  rss_mb_after_pages=round(rss_mb(server), 1))
    server.process.terminate()
    server.process.wait(30)
    del servers.started[name]
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--pages", type=int, default=2000)
    parser.add_argument("--max-entries", default="2000000,500000")
    parser.add_argument("--out", default=str(ROOT / "bench" / "out" / "fence-start"))
    args = parser.parse_args()
    out = Path(args.out)
    (out / "logs").mkdir(parents=True, exist_ok=True)
    settings = bench_settings("fence_start")
    fresh_stores(settings)
    env = {"FEED_JWT_SECRET": settings.jwt_secret.get_secret_value(),
           "FEED_CURSOR_KEYS": settings.cursor_keys.get_secret_value()}
    runs: list[dict[str, object]] = []
    reader = 10_000_000
    with Servers(settings.pg_database, out / "logs", env) as servers:
        fill_log(settings, 0)
        empty = one_run(settings, servers, "empty", max(map(int, args.max_entries.split(","))),
                        args.pages, reader)
        empty["entries"] = 0
        log(f"empty log: {empty}")
        fill_log(settings, args.entries)
        for bound in map(int, args.max_entries.split(",")):
            reader += args.pages
            run = one_run(settings, servers, f"bound-{bound}", bound, args.pages, reader)
            run["entries"] = args.entries
            # Computed: the RSS difference from the empty-log run, per entry.
            run["computed_bytes_per_entry"] = round(
                (float(run["rss_mb_at_ready"]) - float(empty["rss_mb_at_ready"])) * 1024 * 1024  # type: ignore[arg-type]
                / args.entries, 1)
            log(f"{args.entries} entries, bound {bound}: {run}")
            runs.append(run)
    report = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "entries": args.entries, "empty": empty, "runs": runs}
    (out / "fence_start.json").write_text(json.dumps(report, indent=2))
    log(f"report: {out / 'fence_start.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
