"""Follow, block, like and moderation semantics over real HTTP."""
from __future__ import annotations

import secrets
from contextlib import ExitStack

import pytest

from services.shared.clients import pg
from tests.support.api_server import new_user_id

pytestmark = pytest.mark.integration


def _users(api_server, n: int, stack: ExitStack) -> list[tuple[int, object]]:
    """n users that exist (each made one authenticated request) with their clients."""
    out = []
    for _ in range(n):
        user_id = new_user_id()
        http = stack.enter_context(api_server.client(user_id))
        http.get("/v1/posts/1")  # first authenticated request creates the user
        out.append((user_id, http))
    return out


def _post(http, text: str = "post") -> str:
    response = http.post("/v1/posts", json={"text": text},
                         headers={"Idempotency-Key": secrets.token_hex(8)})
    assert response.status_code == 201
    return response.json()["post_id"]


def _follows(settings, follower: int, followed: int) -> bool:
    with pg.connect(settings) as conn:
        return conn.execute("SELECT 1 FROM follows WHERE follower_id = %s AND followed_id = %s",
                            (follower, followed)).fetchone() is not None


def test_follow_is_idempotent_and_keeps_following_since(api_server) -> None:
    with ExitStack() as stack:
        (reader, http), (author, _) = _users(api_server, 2, stack)
        first = http.put(f"/v1/users/{author}/follow")
        again = http.put(f"/v1/users/{author}/follow")
    assert first.status_code == again.status_code == 200
    assert first.json() == again.json()
    assert first.json()["follower_id"] == str(reader)
    assert first.json()["author_id"] == str(author)


def test_unfollow_is_idempotent_and_refollow_starts_a_new_following_since(api_server) -> None:
    with ExitStack() as stack:
        (reader, http), (author, _) = _users(api_server, 2, stack)
        first = http.put(f"/v1/users/{author}/follow").json()["following_since"]
        assert http.delete(f"/v1/users/{author}/follow").status_code == 204
        assert http.delete(f"/v1/users/{author}/follow").status_code == 204
        assert not _follows(api_server.settings, reader, author)
        second = http.put(f"/v1/users/{author}/follow").json()["following_since"]
    assert second > first


def test_follow_unknown_user_is_404_and_self_is_422(api_server) -> None:
    with ExitStack() as stack:
        [(reader, http)] = _users(api_server, 1, stack)
        unknown = http.put(f"/v1/users/{new_user_id()}/follow")
        itself = http.put(f"/v1/users/{reader}/follow")
    assert unknown.status_code == 404
    assert itself.status_code == 422


def test_block_ends_follows_both_ways_and_prevents_refollow(api_server) -> None:
    with ExitStack() as stack:
        (a, http_a), (b, http_b) = _users(api_server, 2, stack)
        assert http_a.put(f"/v1/users/{b}/follow").status_code == 200
        assert http_b.put(f"/v1/users/{a}/follow").status_code == 200
        assert http_a.put(f"/v1/users/{b}/block").status_code == 204
        assert http_a.put(f"/v1/users/{b}/block").status_code == 204
        assert not _follows(api_server.settings, a, b)
        assert not _follows(api_server.settings, b, a)
        assert http_b.put(f"/v1/users/{a}/follow").status_code == 403
        assert http_a.put(f"/v1/users/{b}/follow").status_code == 403
        assert http_a.delete(f"/v1/users/{b}/block").status_code == 204
        assert http_a.delete(f"/v1/users/{b}/block").status_code == 204
        assert http_b.put(f"/v1/users/{a}/follow").status_code == 200


def test_block_hides_posts_in_both_directions(api_server) -> None:
    with ExitStack() as stack:
        (a, http_a), (b, http_b) = _users(api_server, 2, stack)
        post_a, post_b = _post(http_a), _post(http_b)
        assert http_b.get(f"/v1/posts/{post_a}").status_code == 200
        assert http_a.put(f"/v1/users/{b}/block").status_code == 204
        assert http_b.get(f"/v1/posts/{post_a}").status_code == 404
        assert http_a.get(f"/v1/posts/{post_b}").status_code == 404
        assert http_b.put(f"/v1/posts/{post_a}/like").status_code == 404
        assert http_a.get(f"/v1/posts/{post_a}").status_code == 200


def test_block_of_unknown_user_is_404_and_self_is_422(api_server) -> None:
    with ExitStack() as stack:
        [(me, http)] = _users(api_server, 1, stack)
        assert http.put(f"/v1/users/{new_user_id()}/block").status_code == 404
        assert http.put(f"/v1/users/{me}/block").status_code == 422


def test_like_and_unlike_are_idempotent(api_server) -> None:
    with ExitStack() as stack:
        (author, http_a), (fan, http_f) = _users(api_server, 2, stack)
        post_id = _post(http_a)
        assert http_f.put(f"/v1/posts/{post_id}/like").status_code == 204
        assert http_f.put(f"/v1/posts/{post_id}/like").status_code == 204
        with pg.connect(api_server.settings) as conn:
            assert conn.execute("SELECT count(*) FROM likes WHERE post_id = %s",
                                (int(post_id),)).fetchone()[0] == 1
        assert http_f.delete(f"/v1/posts/{post_id}/like").status_code == 204
        assert http_f.delete(f"/v1/posts/{post_id}/like").status_code == 204
        with pg.connect(api_server.settings) as conn:
            assert conn.execute("SELECT count(*) FROM likes WHERE post_id = %s",
                                (int(post_id),)).fetchone()[0] == 0
        assert http_f.put("/v1/posts/777/like").status_code == 404
        assert http_a.delete(f"/v1/posts/{post_id}").status_code == 204
        assert http_f.put(f"/v1/posts/{post_id}/like").status_code == 404


def test_moderation_removes_and_restores_in_one_transaction(api_server) -> None:
    with ExitStack() as stack:
        (author, http_a), (reader, http_r) = _users(api_server, 2, stack)
        moderator_id = new_user_id()
        moderator = stack.enter_context(api_server.client(moderator_id, moderator=True))
        post_id = _post(http_a)
        removed = moderator.post(f"/internal/moderation/posts/{post_id}",
                                 json={"action": "remove", "reason": "spam"})
        assert removed.status_code == 200
        assert removed.json()["state"] == "removed"
        assert removed.json()["moderator_id"] == str(moderator_id)
        assert http_r.get(f"/v1/posts/{post_id}").status_code == 404
        assert http_a.get(f"/v1/posts/{post_id}").json()["visibility"] == "removed"
        assert http_r.put(f"/v1/posts/{post_id}/like").status_code == 404
        with pg.connect(api_server.settings) as conn:
            assert conn.execute("SELECT p.visibility, m.state, m.reason FROM posts p JOIN "
                                "moderation_actions m USING (post_id) WHERE post_id = %s",
                                (int(post_id),)).fetchone() == (0, "removed", "spam")
        restored = moderator.post(f"/internal/moderation/posts/{post_id}",
                                  json={"action": "restore", "reason": "appeal"})
        assert restored.json()["state"] == "restored"
        assert http_r.get(f"/v1/posts/{post_id}").status_code == 200
        assert moderator.post("/internal/moderation/posts/999",
                              json={"action": "remove"}).status_code == 404
        assert moderator.post(f"/internal/moderation/posts/{post_id}",
                              json={"action": "explode"}).status_code == 422
