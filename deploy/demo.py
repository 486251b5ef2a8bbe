"""Demo data for `make run`: a small social graph pushed through the real pipeline.

    python -m deploy.demo

Loads (once: skipped when the database already has users) a power-law graph with two
celebrities, a history of posts and likes into Postgres with COPY (2,000 users and posts
on one node; 500 on the three-node stack, ``demo_spec``; ``FEED_DEMO_SIZE=full|small``,
``make run DEMO=...``, says otherwise), publishes a few
ranking-feature events, waits until the demo reader's feed has items through the API
(printing the pipeline's lag and rate while it drains, giving up only when nothing moves
for STALL_S), then prints the API address, a token for that reader and a ready curl command.
"""
from __future__ import annotations

import os
import sys
import time

import httpx

from deploy.workload import Graph, GraphSpec, generate, load_postgres, publish_feature_events
from deploy.pipeline_progress import PipelineOffsets, ProgressWatch
from deploy.stack import prometheus
from services.api.http.auth import mint_token
from services.shared.settings import Settings, get_settings
from services.shared.clients import pg

# The demo's wait (wait_for_feed): the reader's feed is looked at every POLL_S; the
# pipeline's offsets are read and its progress printed every PROGRESS_EVERY_S (each
# reading asks every partition of six topics, too much to do every second on a loaded
# 2-core machine, and often enough to see a drain move). The wait gives up after STALL_S
# with nothing moving: neither a worker committing nor the relay delivering. Two
# minutes covers a worker's restart (its session timeout, a rebalance, the replay of a
# batch) and a Cassandra node's restart under load, during which commits pause; a
# pipeline that drains slowly is never given up on.
POLL_S = 1.0
PROGRESS_EVERY_S = 5.0
STALL_S = 120.0
# Items on the reader's first page that show the demo graph went through.
READY_ITEMS = 10
# FEED_DEMO_SIZE (``make run DEMO=...``): the demo graph's size (``demo_spec``).
SIZES = ("full", "small")


def pick_reader(graph: Graph) -> int:
    """An ordinary user who follows a celebrity and the most ordinary authors."""
    celebs = set(graph.celebrity_ids.tolist())
    following: dict[int, set[int]] = {}
    for a, b in zip(graph.follower.tolist(), graph.followed.tolist()):
        following.setdefault(a, set()).add(b)
    candidates = [u for u, f in following.items() if u not in celebs and f & celebs]
    return max(candidates, key=lambda u: (len(following[u] - celebs), -u))


def feed_items(client: httpx.Client) -> int:
    """Items on the reader's first page; 0 while the API does not answer with a page."""
    try:
        resp = client.get("/v1/feed", params={"limit": 20})
    except httpx.HTTPError:
        return 0
    return len(resp.json().get("items", [])) if resp.status_code == 200 else 0


def wait_for_feed(base_url: str, token: str, settings: Settings) -> int:
    """Until the reader's feed has ``READY_ITEMS`` items, printing the pipeline's progress
    (lag left, events applied a second) every ``PROGRESS_EVERY_S``; exits after
    ``STALL_S`` without progress (deploy/pipeline_progress.py)."""
    started = time.monotonic()
    watch = ProgressWatch(STALL_S, started)
    next_reading = started
    offsets = PipelineOffsets(settings)
    try:
        with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {token}"},
                          timeout=10) as client:
            while True:
                items = feed_items(client)
                if items >= READY_ITEMS:
                    return items
                now = time.monotonic()
                if now >= next_reading:
                    next_reading = now + PROGRESS_EVERY_S
                    print(f"demo: {now - started:4.0f}s " + _progress_line(watch, offsets, now, items),
                          flush=True)
                    if watch.stalled(now):
                        raise SystemExit(
                            f"demo: the pipeline made no progress for {STALL_S:.0f}s and the "
                            f"reader's feed has {items} items; see `make logs` and `make lag`")
                time.sleep(POLL_S)
    finally:
        offsets.close()


def _progress_line(watch: ProgressWatch, offsets: PipelineOffsets, now: float, items: int) -> str:
    try:
        progress = watch.observe(now, offsets.read())
    except Exception as exc:  # noqa: BLE001 - Kafka not answering is no progress, not a crash
        return f"offsets not readable ({type(exc).__name__}: {exc}); feed has {items} items"
    rate = "" if progress.applied_per_s is None else f", {progress.applied_per_s:,.0f} events/s applied"
    still = ""
    if progress.still_for_s >= PROGRESS_EVERY_S:
        still = f", nothing moved for {progress.still_for_s:.0f}s"
    return f"pipeline lag {progress.lag:,} events{rate}{still}; feed has {items} items"


def demo_spec(nodes: int, size: str | None) -> GraphSpec:
    """The demo graph: ``size`` ``full`` (2,000 users and posts) or ``small`` (500 each,
    ``GraphSpec.demo_small``); unset, full on one node and small on three. On one 2-core
    machine, three nodes drained the full demo at 4-20 events a second on a slow day
    (RF 3: every write three times, three Cassandra JVMs on 2 cores), and the reader's
    feed was still empty after 11 minutes."""
    size = size or ("small" if nodes == 3 else "full")
    if size not in SIZES:
        raise SystemExit(f"demo: FEED_DEMO_SIZE must be one of {', '.join(SIZES)}, not {size!r}")
    return GraphSpec.demo_small() if size == "small" else GraphSpec.demo()


def main() -> int:
    # The demo loads the local stack: its addresses and, on three nodes, its client
    # security (TLS, passwords) for every FEED_* variable not set.
    from deploy.stack.layout import Layout
    layout = Layout.from_env()
    layout.use_as_default()
    settings = get_settings()
    spec = demo_spec(layout.nodes, os.environ.get("FEED_DEMO_SIZE"))
    print(f"demo: {spec.users:,} users, {spec.history_posts:,} posts "
          f"({'small' if spec == GraphSpec.demo_small() else 'full'} demo on {layout.nodes} node(s); "
          "FEED_DEMO_SIZE=full|small)", flush=True)
    graph = generate(spec)
    with pg.connect(settings) as conn:
        row = conn.execute("SELECT count(*) FROM users WHERE user_id = ANY(%s)",
                           (graph.user_ids[:10].tolist(),)).fetchone()
        assert row is not None  # count(*) always returns a row
        loaded = row[0]
        if not loaded:
            counts = load_postgres(conn, graph)
            print(f"demo: loaded {counts} into Postgres", flush=True)
            publish_feature_events(settings, graph, 50)
        else:
            print("demo: demo graph already loaded", flush=True)
    reader = pick_reader(graph)
    token = mint_token(reader, settings.jwt_secret.get_secret_value(), ttl_seconds=7 * 86400,
                       issuer=settings.jwt_issuer, audience=settings.jwt_audience)
    base_url = f"http://{settings.api_host}:{settings.api_port}"
    items = wait_for_feed(base_url, token, settings)
    print(f"\nThe API answers at {base_url} (OpenAPI: {base_url}/docs)")
    print(f"The feed page: {base_url}/ (mint a token there for user {reader}, or paste the one below)")
    print(f"Demo reader {reader} has {items}+ items in the first page. Token (7 days):\n\n{token}\n")
    print(f'curl -s -H "Authorization: Bearer {token}" "{base_url}/v1/feed?limit=5"\n')
    print(f"Prometheus scrapes the services at http://{prometheus.address()} (alerts: "
          f"http://{prometheus.address()}/alerts; SLOs and runbook: docs/operations.md).")
    print("Stop everything with `make down`; watch lag with `make lag`.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
