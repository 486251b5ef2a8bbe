"""The API rides through a Postgres restart: no 500s, and it serves again at once."""
from __future__ import annotations

from deploy.stack import postgres
from deploy.stack.layout import Layout
from tests.integration.conftest import new_user_id


def test_api_serves_normally_right_after_a_postgres_restart(api_server) -> None:
    author = new_user_id()
    with api_server.client(author) as client:
        # Warm the pool: several connections exist before the restart.
        for i in range(5):
            assert client.post("/v1/posts", json={"text": f"before {i}", "media_ids": []},
                               headers={"Idempotency-Key": f"pre-{author}-{i}"}).status_code == 201
        postgres.restart(Layout.from_env())
        statuses = [client.post("/v1/posts", json={"text": f"after {i}", "media_ids": []},
                                headers={"Idempotency-Key": f"post-{author}-{i}"}).status_code
                    for i in range(10)]
    assert statuses == [201] * 10
