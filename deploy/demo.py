"""Demo data for `make run`: a small social graph pushed through the real pipeline.

    python -m deploy.demo

Loads (once: skipped when the database already has users) a power-law graph with two
celebrities, a history of posts and likes into Postgres with COPY, publishes a few
ranking-feature events, waits until the demo reader's feed has items through the API,
then prints the API address, a token for that reader and a ready curl command.
"""
from __future__ import annotations

import sys
import time

import httpx

from bench.workload import Graph, GraphSpec, generate, load_postgres, publish_feature_events
from deploy.stack import prometheus
from services.api.http.auth import mint_token
from services.shared.settings import get_settings
from services.shared.stores import pg

# How long the pipeline may take to take in the demo graph on a 2-core machine.
READY_DEADLINE_S = 300


def pick_reader(graph: Graph) -> int:
    """An ordinary user who follows a celebrity and the most ordinary authors."""
    celebs = set(graph.celebrity_ids.tolist())
    following: dict[int, set[int]] = {}
    for a, b in zip(graph.follower.tolist(), graph.followed.tolist()):
        following.setdefault(a, set()).add(b)
    candidates = [u for u, f in following.items() if u not in celebs and f & celebs]
    return max(candidates, key=lambda u: (len(following[u] - celebs), -u))


def wait_for_feed(base_url: str, token: str) -> int:
    deadline = time.monotonic() + READY_DEADLINE_S
    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {token}"},
                      timeout=10) as client:
        while time.monotonic() < deadline:
            resp = client.get("/v1/feed", params={"limit": 20})
            if resp.status_code == 200 and len(resp.json().get("items", [])) >= 10:
                return len(resp.json()["items"])
            time.sleep(1)
    raise SystemExit(f"demo: the reader's feed was still empty after {READY_DEADLINE_S}s; "
                     f"see `make logs` and `make lag`")


def main() -> int:
    settings = get_settings()
    graph = generate(GraphSpec.demo())
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
    token = mint_token(reader, settings.jwt_secret.get_secret_value(), ttl_seconds=7 * 86400)
    base_url = f"http://{settings.api_host}:{settings.api_port}"
    items = wait_for_feed(base_url, token)
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
