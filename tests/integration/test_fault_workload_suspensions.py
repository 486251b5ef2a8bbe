"""The fault suite's suspension turn (tests/faults/workload.py, ``_suspend``) against the
real API over HTTP, on real Postgres and Cassandra with no pipeline running: the turn
suspends an author the watcher does not follow, the follower's read that follows it shows
none of the author's posts (``shown_after_ack`` 0), a post of the suspended author is an
expected refusal (403, not in the ledger), the checker's Postgres truth leaves the
author's posts out, and the next turn lifts the suspension and the posts come back. The
lost-hide scenario's audit compares the 'account' keys those turns make (no fan-out:
the account copy never gets the suspension, so it differs while it lasts). And a leaving
user's ``DELETE /v1/me`` (``_delete_account``): the follower's next read shows none of
their posts, the follow is gone, and the posts stay in Postgres.
"""
from __future__ import annotations

import asyncio
import dataclasses
import itertools
from collections.abc import Iterator

import httpx
import pytest

from services.fanout.copy_audit import Key
from services.shared.clients import cql, pg
from tests.faults import checker
from tests.faults import lost_hide
from tests.faults import workload as wl
from tests.support.api_server import RunningApi, new_user_id
from tests.support.feed_world import FeedWorld
from tests.support.fence_scene import Scene

pytestmark = pytest.mark.integration


@pytest.fixture
def scene(api_server: RunningApi, world: FeedWorld) -> Iterator[Scene]:
    s = Scene(api_server, world, posts=4)
    yield s
    s.close()


def _account_entries(api: RunningApi, author: int) -> int:
    with pg.connect(api.settings) as conn:
        row = conn.execute("SELECT count(*) FROM visibility_changes WHERE kind = 'account'"
                           " AND subject_id = %s", (author,)).fetchone()
    assert row is not None
    return int(row[0])


async def _account_differs(api: RunningApi, author: int) -> bool:
    session = cql.session(api.settings)
    try:
        return bool(await lost_hide._differing(api.settings, session, [Key("account", author, 0)]))
    finally:
        session.cluster.shutdown()


def test_the_suspension_turn_hides_at_once_refuses_posts_and_its_lift_brings_them_back(
        scene: Scene, api_server: RunningApi, monkeypatch: pytest.MonkeyPatch) -> None:
    w = wl.Workload(api_server.settings, seed=1, readers=2, authors=1, fans=0)
    # The scene's author is the workload's one ordinary author, its reader a reader that
    # follows it; the watcher (a fresh user) follows no one, so loop 0 may suspend it.
    w.cast = dataclasses.replace(w.cast, authors=[scene.author],
                                 readers=[new_user_id(), scene.reader])
    w.ledger.posts.update({p: (scene.author, 0.0) for p in scene.posts})
    w.ledger.follows[(scene.reader, scene.author)] = True
    w._hiding_turns[0] = itertools.cycle([w._suspend])
    monkeypatch.setattr(wl, "SUSPEND_HOLD_S", 0.0)

    async def run() -> None:
        w._client = httpx.AsyncClient(base_url=api_server.base_url, timeout=30.0)
        try:
            assert w._suspendable(0) == [scene.author]
            await w._hiding(0)   # the suspension, then the follower's first page
            assert w.ledger.actions["suspend"] == 1
            assert w.ledger.statuses["before"]["200"] >= 2, w.ledger.statuses
            held = w.ledger.account_hidden[0]
            assert held.since != float("inf") and held.lifted == float("inf")
            after = [p.ids for p in w.ledger.pages
                     if p.reader == scene.reader and p.started >= held.since]
            assert after and not any(set(ids) & set(scene.posts) for ids in after)
            assert checker.shown_after_ack(w)[0] == 0
            assert _account_entries(api_server, scene.author) == 1
            assert checker._visible(api_server.settings, [scene.reader], [scene.author]) == {
                scene.reader: set()}
            assert await _account_differs(api_server, scene.author)
            # A post of the suspended author: refused, expected, not acked.
            w.rng.random = lambda: 0.99  # type: ignore[method-assign]
            before = dict(w.ledger.posts)
            await w._post()
            assert w.ledger.posts == before
            assert w.ledger.refusals["before"] == {"account-suspended": 1}
            assert checker.wrongly_refused(w) == 0
            pages = len(w.ledger.pages)
            await w._hiding(0)   # the lift, then the follower's first page
            assert w.ledger.actions["unsuspend"] == 1 and not w._suspended
            assert held.until <= held.lifted < float("inf")
            assert _account_entries(api_server, scene.author) == 2
            shown = {post for page in w.ledger.pages[pages:] if page.reader == scene.reader
                     for post in page.ids}
            assert shown == set(scene.posts)
            assert checker._visible(api_server.settings, [scene.reader], [scene.author]) == {
                scene.reader: set(scene.posts)}
            assert checker.shown_after_ack(w)[0] == 0
            assert not await _account_differs(api_server, scene.author)
            assert await w.lift_suspensions() == 0
        finally:
            await w._client.aclose()

    asyncio.run(run())


def test_a_leaving_users_deletion_hides_their_posts_at_once_and_for_good(
        scene: Scene, api_server: RunningApi) -> None:
    w = wl.Workload(api_server.settings, seed=2, readers=2, authors=1, fans=0, leaving=0)
    w.cast = dataclasses.replace(w.cast, readers=[new_user_id(), scene.reader], leaving=[scene.author])
    w.ledger.posts.update({p: (scene.author, 0.0) for p in scene.posts})
    w.ledger.follows[(scene.reader, scene.author)] = True

    async def run() -> None:
        w._client = httpx.AsyncClient(base_url=api_server.base_url, timeout=30.0)
        try:
            assert await w._delete_account(scene.author) == scene.reader
            await w._read(scene.reader)
        finally:
            await w._client.aclose()

    asyncio.run(run())
    gone = w.ledger.account_hidden[0]
    assert gone.kind == "deletion" and gone.since < float("inf")
    assert w.ledger.actions["delete_account"] == 1
    after = [p.ids for p in w.ledger.pages if p.started >= gone.since]
    assert after and not any(set(ids) & set(scene.posts) for ids in after)
    assert checker.shown_after_ack(w)[0] == 0
    assert _account_entries(api_server, scene.author) == 1
    with pg.connect(api_server.settings) as conn:
        kept = conn.execute("SELECT count(*) FROM posts WHERE post_id = ANY(%s)", (scene.posts,)).fetchone()
        follows = conn.execute("SELECT count(*) FROM follows WHERE followed_id = %s",
                               (scene.author,)).fetchone()
    assert kept == (len(scene.posts),) and follows == (0,)
