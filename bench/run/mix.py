"""Freshness under the target's read mix: posts at a fixed rate (open loop) while wrk (C)
pages feeds at about ``reads_per_post`` pages per post, and for every post both its
announcement on a follower's stream and its first appearance on that follower's first
page are timed. A post that never arrives by either path is a failure of the run.

The post rate is set from a short unrecorded run of the same mix, so that pages per post
come out near ``reads_per_post`` (1,000 by default) on whatever machine runs it; the
report gives the rate and the pages per post actually achieved.
"""
from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx

from bench.run.phases import PostWatch, _tokens, posting_authors, visibility_summary
from deploy.workload import Graph
from bench.harness.wrk_load import run_wrk
from services.api.http.auth import mint_token
from services.shared.settings import Settings

PROBE_S = 3.0
CALIBRATE_S = 8.0
# After the last post: how long announcements and first pages may still take to show.
DRAIN_S = 30.0
POLL_S = 0.2


class MissedPosts(SystemExit):
    """Raised after the report is written when a post never showed (the run fails)."""


async def _first_page_arrivals(client: httpx.AsyncClient, settings: Settings, watch: PostWatch,
                               seen: dict[tuple[str, int], float], stop: asyncio.Event) -> int:
    """Each watcher polls its first page (latest order: a new post has no likes yet, so in
    ranked order it may sit below the page) and records when each owed post first shows.
    Returns the number of polls."""
    secret = settings.jwt_secret.get_secret_value()
    heads = {r: {"Authorization": f"Bearer {mint_token(r, secret, ttl_seconds=3600)}"} for r in watch.watchers}
    polls, deadline = 0, None
    while True:
        if stop.is_set():
            deadline = deadline or time.perf_counter() + DRAIN_S
            if all(k in seen for k in watch.expected) or time.perf_counter() > deadline:
                return polls
        for reader, headers in heads.items():
            resp = await client.get("/v1/feed", params={"limit": 20, "order": "latest"}, headers=headers)
            polls += 1
            if resp.status_code == 200:
                now = time.perf_counter()
                for item in resp.json().get("items", []):
                    seen.setdefault((str(item["post_id"]), reader), now)
        await asyncio.sleep(POLL_S)


def _wrk_entries(settings: Settings, readers: list[int]) -> list[tuple[str, str]]:
    tokens = _tokens(settings, readers)
    return [("/v1/feed?limit=20", f"Bearer {t}") for t in tokens]


async def _mix(base_url: str, settings: Settings, graph: Graph, entries: list[tuple[str, str]],
               connections: int, seconds: float, api_pid: int, rate: float, label: str):
    """wrk for ``seconds`` while posts go out at ``rate``/s (open loop) and the watchers
    time both paths; returns (reads, watch, first-page arrivals, polls)."""
    n = max(1, int(rate * seconds))
    seen: dict[tuple[str, int], float] = {}
    stop = asyncio.Event()
    async with httpx.AsyncClient(base_url=base_url, timeout=10) as client:
        async with PostWatch(client, settings, posting_authors(graph, 4, seed=5)) as watch:
            poller = asyncio.create_task(_first_page_arrivals(client, settings, watch, seen, stop))
            load = asyncio.create_task(asyncio.to_thread(
                run_wrk, base_url, entries, connections, seconds, api_pid, {}))
            t0 = time.perf_counter()
            for i in range(n):
                # Open loop: each post at its own time, whatever the reads are doing.
                await asyncio.sleep(max(0.0, t0 + i / rate - time.perf_counter()))
                await watch.post(i, f"{label} {i}")
            reads = await load
            stop.set()
            polls = await poller
        # PostWatch's exit waited (up to 30 s) for the streams' announcements.
    return reads, watch, seen, polls


async def seed_mix_open(base_url: str, settings: Settings, graph: Graph, readers: list[int], *,
                        connections: int, seconds: float, api_pid: int,
                        reads_per_post: int = 1000) -> dict[str, Any]:
    """The open-loop mix; see the module docstring. A first, unrecorded run of the whole
    mix (posts, streams and first-page polls share the machine with the reads) measures
    the pages/s the recorded run's post rate is set from."""
    entries = _wrk_entries(settings, readers)
    probe = await asyncio.to_thread(run_wrk, base_url, entries, connections, PROBE_S, api_pid, {})
    calibration, *_ = await _mix(base_url, settings, graph, entries, connections, CALIBRATE_S,
                                 api_pid, max(0.2, probe.pages_per_s / reads_per_post), "calibrate")
    rate = max(0.2, calibration.pages_per_s / reads_per_post)
    reads, watch, seen, polls = await _mix(base_url, settings, graph, entries, connections, seconds,
                                           api_pid, rate, "open mix")
    committed = watch.committed
    first_page = [seen[k] - committed[k[0]] for k in watch.expected if k in seen]
    missed_stream = [k for k in watch.expected if k not in watch.arrivals]
    missed_page = [k for k in watch.expected if k not in seen]
    return {
        "post rate (/s, set from the probe)": round(rate, 2),
        "probe pages/s (reads alone)": probe.pages_per_s,
        "calibration pages/s (the whole mix)": calibration.pages_per_s,
        "posts": len(committed),
        "reads": {"pages": reads.ok, "pages/s": reads.pages_per_s, "p50_ms": reads.p50_ms,
                  "p95_ms": reads.p95_ms, "p99_ms": reads.p99_ms, "non_2xx": reads.non_2xx,
                  "connections": connections},
        "pages per post (computed)": round(reads.ok / max(1, len(committed))),
        "announced on the stream": visibility_summary(
            [watch.arrivals[k] - committed[k[0]] for k in watch.expected if k in watch.arrivals],
            len(watch.expected)),
        "on the follower's first page": visibility_summary(first_page, len(watch.expected)),
        "first-page polls": polls,
        "missed": {"stream": [list(k) for k in missed_stream], "first page": [list(k) for k in missed_page]},
    }


def missed(result: dict[str, Any]) -> int:
    m = result["missed"]
    return len(m["stream"]) + len(m["first page"])
