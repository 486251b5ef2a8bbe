"""GET /v1/feed served by several processes: snapshots, caches and `python -m services.api`.

Each API process keeps its own caches (post bodies, scores, snapshots). These tests check
that none of them is the only copy: a next page served by a process that did not build
the snapshot continues it; a block made after the first page is honoured by every
process; the multi-worker server really runs several processes, each with its own node
lease, and a walk whose pages land on any of them is one consistent snapshot.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import httpx
import pytest

from services.api.app import create_app
from services.api.http.auth import mint_token
from services.shared.settings import Settings
from tests.support.api_server import RunningApi, new_user_id, serve_in_thread, stop_server
from tests.support.feed_world import FeedWorld, feed_ids, utc_now
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def other_api(settings: Settings) -> Iterator[RunningApi]:
    """A second API app: another process, as far as the read path can tell."""
    app = create_app(settings)
    server, thread, base_url = serve_in_thread(app)
    try:
        yield RunningApi(base_url, settings, app)
    finally:
        stop_server(server, thread)


def test_next_page_continues_in_a_process_that_did_not_build_the_snapshot(
        api_server: RunningApi, other_api: RunningApi, world: FeedWorld) -> None:
    reader, kept, blocker = new_user_id(), new_user_id(), new_user_id()
    world.follow(reader, kept)
    world.follow(reader, blocker)
    now = utc_now()
    made = [world.write(kept, at=now - timedelta(minutes=m), inbox_of=[reader]) for m in range(5)]
    hidden = world.write(blocker, at=now - timedelta(seconds=90), inbox_of=[reader])
    expected = [p.post_id for p in sorted(made + [hidden], key=lambda p: p.created_at,
                                          reverse=True)]
    with api_server.client(reader) as here, other_api.client(reader) as there:
        first = here.get("/v1/feed", params={"limit": 2}).json()
        assert feed_ids(first) == expected[:2]
        world.block(reader, blocker)
        second = there.get("/v1/feed", params={"limit": 2, "cursor": first["next_cursor"]}).json()
        third = here.get("/v1/feed", params={"limit": 2, "cursor": second["next_cursor"]}).json()
    assert "warnings" not in second and "warnings" not in third
    assert first["feed_version"] == second["feed_version"] == third["feed_version"]
    rest = [p for p in expected[2:] if p != hidden.post_id]
    assert feed_ids(second) + feed_ids(third) == rest[:4]


def test_a_moved_rank_key_reaches_the_next_snapshot(api_server: RunningApi, world: FeedWorld) -> None:
    reader, author = new_user_id(), new_user_id()
    world.follow(reader, author)
    now = utc_now()
    newer = world.write(author, at=now - timedelta(minutes=1), inbox_of=[reader])
    older = world.write(author, at=now - timedelta(hours=1), inbox_of=[reader])
    with api_server.client(reader) as client:
        first = client.get("/v1/feed").json()
        assert feed_ids(first) == [newer.post_id, older.post_id]
        world.set_score(older.post_id, 5.0)  # the ranker's move: rows under a new key
        assert feed_ids(client.get("/v1/feed").json()) == [older.post_id, newer.post_id]


@pytest.fixture(scope="module")
def two_workers(settings: Settings) -> Iterator[str]:
    """``python -m services.api`` with FEED_API_WORKERS=2 on this session's stores."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = dict(os.environ, FEED_PG_DATABASE=settings.pg_database,
               FEED_CASSANDRA_KEYSPACE=settings.cassandra_keyspace,
               FEED_TOPIC_PREFIX=settings.topic_prefix, FEED_API_PORT=str(port),
               FEED_API_WORKERS="2")
    process = subprocess.Popen([sys.executable, "-m", "services.api"], cwd=ROOT, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base_url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        assert process.poll() is None, "the API exited"
        try:
            return httpx.get(base_url + "/readyz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False
    try:
        wait_until(ready, timeout=90, interval=0.3, message="two API workers to be ready")
        yield base_url
    finally:
        process.terminate()
        process.wait(30)


def _node_id(base_url: str) -> str:
    """The Snowflake node id of whichever worker accepts a new connection."""
    metrics = httpx.get(base_url + "/metrics", timeout=5).text  # a new connection each time
    return next(line.split()[1] for line in metrics.splitlines()
                if line.startswith("feed_api_id_node "))


def test_two_workers_serve_with_their_own_node_leases(two_workers: str) -> None:
    seen: set[str] = set()

    def both_seen() -> bool:
        seen.add(_node_id(two_workers))
        return len(seen) >= 2
    wait_until(both_seen, timeout=30, interval=0.05, message="both workers to accept connections")


def test_a_walk_over_fresh_connections_is_one_snapshot(two_workers: str, settings: Settings,
                                                       world: FeedWorld) -> None:
    reader, author = new_user_id(), new_user_id()
    world.follow(reader, author)
    now = utc_now()
    made = [world.write(author, at=now - timedelta(seconds=s), inbox_of=[reader])
            for s in range(9)]
    headers = {"Authorization": f"Bearer {mint_token(reader, settings.jwt_secret.get_secret_value())}"}
    pages = [httpx.get(two_workers + "/v1/feed", params={"limit": 2}, headers=headers).json()]
    while pages[-1]["next_cursor"]:
        pages.append(httpx.get(two_workers + "/v1/feed", headers=headers,  # new connection
                               params={"limit": 2, "cursor": pages[-1]["next_cursor"]}).json())
    assert [i for p in pages for i in feed_ids(p)] == [p.post_id for p in made]
    assert len({p["feed_version"] for p in pages}) == 1
    assert not any("warnings" in p for p in pages)
