"""The API rides through a Postgres restart: while the database is unavailable it answers
503 with Retry-After (never 500), then it serves normally again without a restart."""
from __future__ import annotations

import time

from deploy.stack import postgres
from deploy.stack.layout import Layout
from tests.support.api_server import new_user_id


def test_api_serves_normally_right_after_a_postgres_restart(api_server) -> None:
    author = new_user_id()
    with api_server.client(author) as client:
        # Warm the pool: several connections exist before the restart.
        for i in range(5):
            assert client.post("/v1/posts", json={"text": f"before {i}", "media_ids": []},
                               headers={"Idempotency-Key": f"pre-{author}-{i}"}).status_code == 201
        postgres.restart(Layout.from_env())
        statuses: list[int] = []
        deadline = time.monotonic() + 60  # the pool re-connects with back-off
        while time.monotonic() < deadline and statuses[-10:] != [201] * 10:
            resp = client.post("/v1/posts", json={"text": f"after {len(statuses)}", "media_ids": []},
                               headers={"Idempotency-Key": f"post-{author}-{len(statuses)}"})
            statuses.append(resp.status_code)
            if resp.status_code == 503:
                assert resp.headers["Retry-After"] == "1"
                assert resp.headers["content-type"].startswith("application/problem+json")
                time.sleep(0.2)
    assert set(statuses) <= {201, 503}, statuses
    assert statuses[-10:] == [201] * 10, statuses
