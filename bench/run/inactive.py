"""Inactive readers in a bench run: the graph's activity distribution applied, the
sweeper run, the rows the fan-out saved counted, and returning readers' first pages timed.

The run cannot wait 14 days, so each user's last read is written as the API would have
written it that many days ago (``ActivityStore.record_read`` for that period), and the
fan-out's own sweeper code (``InactiveSweeper``) runs once, in this process, before the
history is taken in. Users the other phases read or watch are kept active, so those
phases measure what they did before.

Returning readers: inactive users (never seen by the API in this run) each open their
feed once, one at a time; the page is served at once from the author partitions while
the inbox is regenerated. Timed beside the same first page of as many active users the
API has not seen either (both pay the once-a-day activity write and read).
"""
from __future__ import annotations

import asyncio
import random
import time
from collections import defaultdict
from datetime import datetime, timezone
from typing import Any

import httpx
import numpy as np

from bench.run.phases import _tokens
from deploy.workload import Graph
from services.fanout.copies import CopyStore
from services.fanout.inactive import InactiveSweeper
from services.fanout.inbox import InboxStore
from services.fanout.rebuild import rebuilder
from services.shared.settings import Settings
from services.shared.clients import cql
from services.shared.stores.activity import ACTIVE, ActivityStore, Window
from services.shared.stores.cql_async import CqlRunner

WRITES_IN_FLIGHT = 64


def _quantiles(values: list[float], scale: float = 1.0, digits: int = 1) -> dict[str, Any]:
    v = sorted(values)
    q = lambda p: round(v[min(len(v) - 1, int(p * len(v)))] * scale, digits) if v else None  # noqa: E731
    return {"n": len(v), "p50": q(0.5), "p95": q(0.95), "max": q(1.0)}


async def _apply_and_sweep(settings: Settings, graph: Graph, keep_active: set[int]) -> dict[str, Any]:
    session = cql.session(settings)
    try:
        runner = CqlRunner(session)
        store = ActivityStore(session, runner)
        window = Window(settings.inactive_after, settings.activity_resolution)
        today = window.period(int(time.time() * 1000))
        days = {u: (0 if u in keep_active else int(d))
                for u, d in zip(graph.user_ids.tolist(), graph.last_read_days.tolist())}
        per_day = max(1, round(86400 / window.resolution.total_seconds()))
        t = time.perf_counter()
        await store.record_reads([(u, today - d * per_day) for u, d in days.items()],
                                 window.index_ttl_s, WRITES_IN_FLIGHT)
        recorded_s = time.perf_counter() - t
        # A sweeper that has been running all along judged each of those days as it left
        # the window; this one starts now, so it is told to start before the oldest.
        await store.save_progress(today - (max(days.values()) + 1) * per_day)
        copies = CopyStore(session, runner, settings.fanout_follower_page)
        inbox = InboxStore(session, runner, max_in_flight=settings.fanout_max_in_flight,
                           cap=settings.inbox_cap, trim_every=settings.inbox_trim_every)

        t = time.perf_counter()
        report = await InactiveSweeper(store, window,
                                       rebuilder(copies, inbox, settings.inbox_cap)).sweep()
        sweep_s = time.perf_counter() - t
    finally:
        session.cluster.shutdown()
    follows = np.bincount(np.searchsorted(graph.user_ids, graph.follower),
                          minlength=len(graph.user_ids))
    flagged = set(report.flagged)
    return {"users": len(days), "inactive users (last read > 14 days ago)":
            sum(1 for d in days.values() if d > window.periods),
            "readers flagged by the sweeper": len(flagged),
            "flag rows written (their follows)": int(sum(follows[i] for i, u in
                                                         enumerate(graph.user_ids.tolist())
                                                         if u in flagged)),
            "activity records written (s)": round(recorded_s, 1),
            "sweep (s)": round(sweep_s, 1),
            "_flagged": sorted(flagged)}


def apply_activity(settings: Settings, graph: Graph, keep_active: set[int]) -> dict[str, Any]:
    """Every user's last read per the graph's distribution, then one sweep."""
    return asyncio.run(_apply_and_sweep(settings, graph, keep_active))


def _with_recent_posts(graph: Graph, users: list[int], hours: float = 40) -> list[int]:
    """Users following an author who posted in the last ``hours`` (their feed is not
    empty by construction), so a page with no items would be the product's fault."""
    cutoff = datetime.now(timezone.utc).timestamp() - hours * 3600
    recent_authors = {a for _p, a, c, _t in graph.posts if c.timestamp() >= cutoff}
    following: dict[int, set[int]] = defaultdict(set)
    wanted = set(users)
    for a, b in zip(graph.follower.tolist(), graph.followed.tolist()):
        if a in wanted:
            following[a].add(b)
    return [u for u in users if following[u] & recent_authors]


async def _first_pages(base_url: str, settings: Settings, users: list[int],
                       store: ActivityStore | None, timeout_s: float) -> dict[str, Any]:
    tokens = dict(zip(users, _tokens(settings, users)))
    first_ms, items, empty, regenerating, regen_s, after_ms = [], [], 0, 0, [], []
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as client:
        for user in users:
            headers = {"Authorization": f"Bearer {tokens[user]}"}
            t = time.perf_counter()
            resp = await client.get("/v1/feed", params={"limit": 20}, headers=headers)
            first_ms.append(time.perf_counter() - t)
            resp.raise_for_status()
            page = resp.json()
            items.append(len(page["items"]))
            empty += not page["items"]
            if "regenerating" not in page.get("warnings", []) or store is None:
                continue
            regenerating += 1
            while time.perf_counter() - t < timeout_s:
                if (await store.activity(user)).state == ACTIVE:
                    regen_s.append(time.perf_counter() - t)
                    break
                await asyncio.sleep(0.05)
            t2 = time.perf_counter()
            (await client.get("/v1/feed", params={"limit": 20}, headers=headers)).raise_for_status()
            after_ms.append(time.perf_counter() - t2)
    return {"first page (ms)": _quantiles(first_ms, 1000), "items on it": _quantiles(items, 1, 0),
            "empty first pages": empty, "pages saying regenerating": regenerating,
            "inbox regenerated after (s, from the request)": _quantiles(regen_s, 1, 2),
            "not regenerated within timeout": regenerating - len(regen_s),
            "first page once regenerated (ms)": _quantiles(after_ms, 1000)}


async def _returning(base_url: str, settings: Settings, graph: Graph, flagged: list[int],
                     active: list[int], n: int, timeout_s: float) -> dict[str, Any]:
    rng = random.Random(17)
    back = rng.sample(_with_recent_posts(graph, flagged), min(n, len(flagged)))
    control = rng.sample(_with_recent_posts(graph, active), min(n, len(active)))
    session = cql.session(settings)
    try:
        store = ActivityStore(session, CqlRunner(session))
        returning = await _first_pages(base_url, settings, back, store, timeout_s)
        still_active = await _first_pages(base_url, settings, control, None, timeout_s)
    finally:
        session.cluster.shutdown()
    return {"returning readers": returning, "active readers (first seen by the API)": still_active}


def returning_readers(base_url: str, settings: Settings, graph: Graph, flagged: list[int],
                      active: list[int], n: int = 20, timeout_s: float = 60.0) -> dict[str, Any]:
    return asyncio.run(_returning(base_url, settings, graph, flagged, active, n, timeout_s))
