"""End to end: the API, the CDC relay, the fan-out and the ranker as separate processes.

Every action goes through HTTP as a client would make it (POST a post, PUT a follow, DELETE
a post, the moderation endpoint) and every effect is read back through HTTP (feed pages,
the SSE stream). Postgres → relay → Kafka → fan-out → Cassandra → API is the only route a
change can take. Cassandra is read directly only to prove where a post was stored.
"""
from __future__ import annotations

import time

import pytest

from tests.support.waiting import wait_until
from tests.support.feed_world import SseReader, new_item_post_ids
from .conftest import (CELEBRITY_FOLLOWERS, VISIBLE_S, System, feed, follow_authors, inbox_post_ids,
                       new_users, post)


pytestmark = pytest.mark.e2e


def _followers_counted(system: System, author: int) -> int:
    row = system.session().execute("SELECT followers FROM follow_edges WHERE followed_id = %s LIMIT 1",
                               (author,)).one()
    return int(row.followers or 0) if row else 0


def test_a_post_reaches_a_followers_stream_and_feed(system: System) -> None:
    author, reader = new_users(system, 2)
    follow_authors(system, reader, [author])
    stream = SseReader(system.client(reader))
    try:
        assert stream.connected.wait(10) and stream.status == 200
        with system.client(author) as a:
            started = time.monotonic()
            post_id = post(a, "hello from end to end")
        announced: list[dict[str, str]] = []
        deadline = time.monotonic() + VISIBLE_S
        while post_id not in new_item_post_ids(announced):
            assert time.monotonic() < deadline, f"no new_item for the post; got {announced}"
            event = stream.next_item(0.5)
            if event is not None:
                announced.append(event)
        with system.client(reader) as r:
            wait_until(lambda: post_id in feed(r), timeout=VISIBLE_S, interval=0.2,
                       message="the post in the follower's feed")
        print(f"post to stream and feed: {time.monotonic() - started:.2f} s")
    finally:
        stream.close()
    assert post_id in inbox_post_ids(system, reader)  # an ordinary author's post: fanned out


def test_follow_unfollow_block_delete_and_removal_each_show_on_the_next_page(system: System) -> None:
    reader, dropped, blocked, author = new_users(system, 4)
    [moderator] = new_users(system, 1)
    follow_authors(system, reader, [dropped, blocked, author])
    with system.client(dropped) as d, system.client(blocked) as b, system.client(author) as a:
        from_dropped, from_blocked = post(d, "soon unfollowed"), post(b, "soon blocked")
        deleted, removed, kept = post(a, "to delete"), post(a, "to remove"), post(a, "to keep")
        with system.client(reader) as r:
            everything = {from_dropped, from_blocked, deleted, removed, kept}
            wait_until(lambda: everything <= set(feed(r)), timeout=VISIBLE_S, interval=0.2,
                       message="every post in the reader's feed")
            assert r.delete(f"/v1/users/{dropped}/follow").status_code == 204
            wait_until(lambda: from_dropped not in feed(r), timeout=VISIBLE_S, interval=0.2,
                       message="the unfollowed author's post to go")
            assert r.put(f"/v1/users/{blocked}/block").status_code == 204
            wait_until(lambda: from_blocked not in feed(r), timeout=VISIBLE_S, interval=0.2,
                       message="the blocked author's post to go")
            assert a.delete(f"/v1/posts/{deleted}").status_code == 204
            wait_until(lambda: deleted not in feed(r), timeout=VISIBLE_S, interval=0.2,
                       message="the deleted post to go")
            with system.client(moderator, moderator=True) as m:
                got = m.post(f"/internal/moderation/posts/{removed}",
                             json={"action": "remove", "reason": "spam"})
                assert got.status_code == 200, got.text
            wait_until(lambda: removed not in feed(r), timeout=VISIBLE_S, interval=0.2,
                       message="the removed post to go")
            assert feed(r) == [kept]
            assert feed(r, order="latest") == [kept]
            # A new follow brings the author's later posts.
            follow_authors(system, reader, [dropped])
            again = post(d, "followed again")
            wait_until(lambda: again in feed(r), timeout=VISIBLE_S, interval=0.2,
                       message="a post of the author followed again")


def test_a_celebrity_post_reaches_followers_without_inbox_rows(system: System) -> None:
    star, *fans = new_users(system, 1 + CELEBRITY_FOLLOWERS)
    for fan in fans:
        follow_authors(system, fan, [star])
    # The tier decision weighs the counted followers: wait until all are counted.
    wait_until(lambda: _followers_counted(system, star) == CELEBRITY_FOLLOWERS,
               timeout=VISIBLE_S, interval=0.2, message="the star's followers to be counted")
    with system.client(star) as s:
        post_id = post(s, "to all my fans")
    for fan in fans:
        with system.client(fan) as f:
            wait_until(lambda: post_id in feed(f), timeout=VISIBLE_S, interval=0.2,
                       message="the celebrity's post in a fan's feed")
            assert post_id in feed(f, order="latest")
    time.sleep(1)  # a fan-out that was going to write inbox rows has had its time
    for fan in fans:
        assert post_id not in inbox_post_ids(system, fan)


def test_a_fanout_worker_killed_mid_way_loses_and_duplicates_nothing(system: System) -> None:
    authors, readers = new_users(system, 3), new_users(system, 2)
    for reader in readers:
        follow_authors(system, reader, authors)
    for author in authors:
        wait_until(lambda: _followers_counted(system, author) == len(readers),
                   timeout=VISIBLE_S, interval=0.2, message="the follows to be counted")
    clients = {a: system.client(a) for a in authors}
    posts: list[int] = []
    killed = None
    try:
        for i in range(30):
            posts.append(post(clients[authors[i % len(authors)]], f"burst {i}"))
            if i == 10:
                killed = system.kill("fanout")
            time.sleep(0.05)
    finally:
        for c in clients.values():
            c.close()
    wait_until(lambda: system.service_pid("fanout") not in (None, killed), timeout=30, interval=0.2,
               message="the supervisor to restart the fan-out")
    for reader in readers:
        with system.client(reader) as r:
            wait_until(lambda: set(posts) <= set(feed(r)), timeout=2 * VISIBLE_S, interval=0.5,
                       message="every post in every reader's feed after the restart")
            seen = feed(r)
            assert len(seen) == len(set(seen)) == len(posts)
        inbox = inbox_post_ids(system, reader)  # delivered by the fan-out, not only by the fallback
        assert sorted(inbox) == sorted(posts)
