"""Posts and Idempotency-Key over real HTTP against the session's Postgres."""
from __future__ import annotations

import asyncio
import secrets
import threading

import pytest

from services.api.stores.idempotency import purge_expired
from services.shared.clients import pg
from services.shared.domain import ids
from tests.support.api_server import new_user_id

pytestmark = pytest.mark.integration

PROBLEM_BASE = "https://feed.example/problems/"


def _key() -> str:
    return "key-" + secrets.token_hex(8)


def _count_posts(settings, author_id: int) -> int:
    with pg.connect(settings) as conn:
        return conn.execute("SELECT count(*) FROM posts WHERE author_id = %s",
                            (author_id,)).fetchone()[0]


def test_create_post_returns_201_with_string_ids_and_author_from_token(api_server) -> None:
    author = new_user_id()
    with api_server.client(author) as http:
        response = http.post("/v1/posts", json={"text": "hello", "media_ids": ["m1"]},
                             headers={"Idempotency-Key": _key()})
        assert response.status_code == 201
        post = response.json()
        assert post["author_id"] == str(author)
        assert isinstance(post["post_id"], str) and post["post_id"].isdigit()
        assert response.headers["location"] == f"/v1/posts/{post['post_id']}"
        assert ids.parse(int(post["post_id"])).node == api_server.app.state.ids.node_id
        fetched = http.get(f"/v1/posts/{post['post_id']}")
    assert fetched.status_code == 200
    assert fetched.json() == post


def test_author_id_in_body_is_rejected_not_obeyed(api_server) -> None:
    author = new_user_id()
    with api_server.client(author) as http:
        response = http.post("/v1/posts", json={"text": "x", "author_id": "1"},
                             headers={"Idempotency-Key": _key()})
    assert response.status_code == 422
    assert response.json()["type"] == PROBLEM_BASE + "validation-failed"
    assert _count_posts(api_server.settings, author) == 0


def test_missing_idempotency_key_is_400(api_server) -> None:
    with api_server.client(new_user_id()) as http:
        response = http.post("/v1/posts", json={"text": "x"})
    assert response.status_code == 400
    assert response.json()["type"] == PROBLEM_BASE + "idempotency-key-required"


@pytest.mark.parametrize("body", [{"text": ""}, {"text": "a" * 5001}, {"text": "nul\u0000"},
                                  {"text": "x", "media_ids": ["bad id"]},
                                  {"text": "x", "media_ids": [str(i) for i in range(11)]},
                                  {"media_ids": []}, [], "text"])
def test_invalid_post_bodies_are_422(api_server, body) -> None:
    with api_server.client(new_user_id()) as http:
        response = http.post("/v1/posts", json=body, headers={"Idempotency-Key": _key()})
    assert response.status_code == 422
    assert response.headers["content-type"] == "application/problem+json"


def test_lone_surrogate_and_broken_json_are_422_not_500(api_server) -> None:
    with api_server.client(new_user_id()) as http:
        surrogate = http.post("/v1/posts", content=b'{"text": "\\ud800"}',
                              headers={"Idempotency-Key": _key(),
                                       "Content-Type": "application/json"})
        broken = http.post("/v1/posts", content=b'{"text": ',
                           headers={"Idempotency-Key": _key(),
                                    "Content-Type": "application/json"})
    assert surrogate.status_code == 422
    assert broken.status_code == 422


def test_oversized_body_is_413(api_server) -> None:
    with api_server.client(new_user_id()) as http:
        response = http.post("/v1/posts", json={"text": "a" * 100_000},
                             headers={"Idempotency-Key": _key()})
    assert response.status_code == 413
    assert response.json()["type"] == PROBLEM_BASE + "body-too-large"


def test_replay_with_same_key_and_body_returns_the_same_status_and_body(api_server) -> None:
    author, key = new_user_id(), _key()
    with api_server.client(author) as http:
        first = http.post("/v1/posts", json={"text": "once", "media_ids": []},
                          headers={"Idempotency-Key": key})
        # Same body, other key order and whitespace: still the same request.
        again = http.post("/v1/posts", content=b'{ "media_ids": [], "text": "once" }',
                          headers={"Idempotency-Key": key, "Content-Type": "application/json"})
    assert first.status_code == again.status_code == 201
    assert again.content == first.content
    assert again.headers["idempotent-replayed"] == "true"
    assert _count_posts(api_server.settings, author) == 1


def test_same_key_with_different_body_is_422(api_server) -> None:
    author, key = new_user_id(), _key()
    with api_server.client(author) as http:
        assert http.post("/v1/posts", json={"text": "a"},
                         headers={"Idempotency-Key": key}).status_code == 201
        other = http.post("/v1/posts", json={"text": "b"}, headers={"Idempotency-Key": key})
    assert other.status_code == 422
    assert other.json()["type"] == PROBLEM_BASE + "idempotency-key-reused"
    assert _count_posts(api_server.settings, author) == 1


def test_another_authors_same_key_is_independent(api_server) -> None:
    key = _key()
    a, b = new_user_id(), new_user_id()
    with api_server.client(a) as http_a, api_server.client(b) as http_b:
        post_a = http_a.post("/v1/posts", json={"text": "same"}, headers={"Idempotency-Key": key})
        post_b = http_b.post("/v1/posts", json={"text": "same"}, headers={"Idempotency-Key": key})
    assert post_a.status_code == post_b.status_code == 201
    assert post_a.json()["post_id"] != post_b.json()["post_id"]
    assert post_b.json()["author_id"] == str(b)


def test_request_while_first_is_in_flight_is_409(api_server) -> None:
    """A claimed key without a stored response is a request still running."""
    from services.api.write.idempotency import request_fingerprint

    author, key = new_user_id(), _key()
    with api_server.client(author) as http:
        http.get("/healthz")
    with pg.connect(api_server.settings) as conn:
        conn.execute("INSERT INTO users (user_id) VALUES (%s) ON CONFLICT DO NOTHING", (author,))
        conn.execute("INSERT INTO idempotency_keys (author_id, key, request_hash, expires_at) "
                     "VALUES (%s, %s, %s, now() + interval '1 day')",
                     (author, key, request_fingerprint({"text": "slow", "media_ids": []})))
    with api_server.client(author) as http:
        response = http.post("/v1/posts", json={"text": "slow"}, headers={"Idempotency-Key": key})
    assert response.status_code == 409
    assert response.json()["type"] == PROBLEM_BASE + "idempotency-key-in-flight"
    assert _count_posts(api_server.settings, author) == 0


def test_abandoned_claim_is_taken_over_after_its_timeout(api_server) -> None:
    from services.api.write.idempotency import request_fingerprint

    author, key = new_user_id(), _key()
    with pg.connect(api_server.settings) as conn:
        conn.execute("INSERT INTO users (user_id) VALUES (%s) ON CONFLICT DO NOTHING", (author,))
        conn.execute("INSERT INTO idempotency_keys (author_id, key, request_hash, created_at, "
                     "expires_at) VALUES (%s, %s, %s, now() - interval '1 hour', "
                     "now() + interval '1 day')",
                     (author, key, request_fingerprint({"text": "dead", "media_ids": []})))
    with api_server.client(author) as http:
        response = http.post("/v1/posts", json={"text": "dead"}, headers={"Idempotency-Key": key})
    assert response.status_code == 201
    assert _count_posts(api_server.settings, author) == 1


def test_concurrent_requests_with_one_key_create_one_post(api_server) -> None:
    author, key = new_user_id(), _key()
    results: list[tuple[int, bytes]] = []
    lock = threading.Lock()
    start = threading.Barrier(8)

    def send() -> None:
        with api_server.client(author) as http:
            start.wait()
            response = http.post("/v1/posts", json={"text": "race"},
                                 headers={"Idempotency-Key": key})
            with lock:
                results.append((response.status_code, response.content))

    threads = [threading.Thread(target=send) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    statuses = [s for s, _ in results]
    assert len(results) == 8
    assert set(statuses) <= {201, 409}
    assert 201 in statuses
    assert len({body for status, body in results if status == 201}) == 1
    assert _count_posts(api_server.settings, author) == 1


def test_expired_key_is_reusable_and_purged(api_server) -> None:
    author, key = new_user_id(), _key()
    with api_server.client(author) as http:
        first = http.post("/v1/posts", json={"text": "day 1"}, headers={"Idempotency-Key": key})
        with pg.connect(api_server.settings) as conn:
            conn.execute("UPDATE idempotency_keys SET expires_at = now() - interval '1 second' "
                         "WHERE author_id = %s AND key = %s", (author, key))
        second = http.post("/v1/posts", json={"text": "day 2"}, headers={"Idempotency-Key": key})
    assert first.status_code == second.status_code == 201
    assert first.json()["post_id"] != second.json()["post_id"]
    with pg.connect(api_server.settings) as conn:
        conn.execute("UPDATE idempotency_keys SET expires_at = now() - interval '1 second' "
                     "WHERE author_id = %s AND key = %s", (author, key))
    async def purge() -> int:
        async with pg.async_pool(api_server.settings, min_size=1, max_size=1) as pool:
            return await purge_expired(pool)

    assert asyncio.run(purge()) >= 1
    with pg.connect(api_server.settings) as conn:
        assert conn.execute("SELECT 1 FROM idempotency_keys WHERE author_id = %s AND key = %s",
                            (author, key)).fetchone() is None


def test_delete_is_author_only_soft_and_idempotent(api_server) -> None:
    author, other = new_user_id(), new_user_id()
    with api_server.client(author) as http, api_server.client(other) as stranger:
        post_id = http.post("/v1/posts", json={"text": "bye"},
                            headers={"Idempotency-Key": _key()}).json()["post_id"]
        assert stranger.delete(f"/v1/posts/{post_id}").status_code == 403
        assert http.delete(f"/v1/posts/{post_id}").status_code == 204
        assert http.delete(f"/v1/posts/{post_id}").status_code == 204
        assert http.get(f"/v1/posts/{post_id}").status_code == 404
        assert http.delete("/v1/posts/12345").status_code == 404
    with pg.connect(api_server.settings) as conn:
        row = conn.execute("SELECT deleted_at FROM posts WHERE post_id = %s",
                           (int(post_id),)).fetchone()
    assert row is not None and row[0] is not None


@pytest.mark.parametrize("path", ["/v1/posts/0", "/v1/posts/abc", "/v1/posts/-5",
                                  "/v1/posts/9223372036854775808"])
def test_bad_post_ids_in_path_are_422(api_server, path: str) -> None:
    with api_server.client(new_user_id()) as http:
        assert http.get(path).status_code == 422
