"""Hiding writes racing on one pair of users, over real HTTP: one lock order (the pair,
then the visibility fence, then the rows), so Postgres never has to abort one of them as
a deadlock (which the client would see as a 503)."""
from __future__ import annotations

import asyncio
from datetime import datetime, timezone

import httpx
import pytest

from services.shared.clients import pg
from tests.support.api_server import new_user_id

pytestmark = pytest.mark.integration

PAIRS = 1000
IN_FLIGHT = 64


def _pairs_following_each_other(settings, n: int) -> list[tuple[int, int]]:
    pairs = [(new_user_id(), new_user_id()) for _ in range(n)]
    now = datetime.now(timezone.utc)
    with pg.connect(settings) as conn, conn.cursor() as cur:
        cur.executemany("INSERT INTO users (user_id, created_at) VALUES (%s, %s)",
                        [(u, now) for pair in pairs for u in pair])
        cur.executemany("INSERT INTO follows (follower_id, followed_id, following_since) "
                        "VALUES (%s, %s, %s)",
                        [edge for a, b in pairs for edge in ((a, b, now), (b, a, now))])
    return pairs


def test_block_and_unfollow_of_one_pair_never_deadlock(api_server) -> None:
    pairs = _pairs_following_each_other(api_server.settings, PAIRS)

    async def race() -> list[int]:
        limit = asyncio.Semaphore(IN_FLIGHT)
        async with httpx.AsyncClient(base_url=api_server.base_url, timeout=60) as http:
            async def call(method: str, path: str, user: int) -> int:
                async with limit:
                    response = await http.request(
                        method, path, headers={"Authorization": f"Bearer {api_server.token(user)}"})
                    return response.status_code
            # a blocks b while b unfollows a and a unfollows b: every hiding statement of
            # the pair at once.
            calls = [call(m, p, u) for a, b in pairs for m, p, u in (
                ("PUT", f"/v1/users/{b}/block", a), ("DELETE", f"/v1/users/{a}/follow", b),
                ("DELETE", f"/v1/users/{b}/follow", a))]
            return list(await asyncio.gather(*calls))

    statuses = asyncio.run(race())
    errors = [s for s in statuses if s >= 300]
    assert errors == [], f"{len(errors)} of {len(statuses)} answers were not 2xx: {sorted(set(errors))}"
    ids = [u for pair in pairs for u in pair]
    with pg.connect(api_server.settings) as conn:
        left = conn.execute("SELECT count(*) FROM follows WHERE follower_id = ANY(%s)", (ids,)).fetchone()
        blocks = conn.execute("SELECT count(*) FROM blocks WHERE blocker_id = ANY(%s)", (ids,)).fetchone()
    assert left == (0,) and blocks == (PAIRS,)
