"""The visibility log's lifecycle as the API lives it (services/api/visibility/fence.py):
forgetting only what the verifier released (migration 0004), a log that went back (a
restore, a reset sequence), a start over a large log and ``/readyz``, and window mode
past ``FEED_VISIBILITY_MAX_ENTRIES``.

As in test_eligibility_fence, the copies are written once as the fan-out would have
and never updated: only the fence can hide what a later write hid.
"""
from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from services.api.visibility.fence import MARKS_EVERY_S, VisibilityFence
from services.shared.clients import pg
from services.shared.settings import Settings
from tests.support.api_server import RunningApi, running_api
from tests.support.feed_world import FeedWorld
from tests.support.fence_scene import Scene
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration


def _sql(settings: Settings, statement: str, params: tuple[object, ...] = ()) -> list[tuple]:
    with pg.connect(settings, autocommit=True) as conn:
        cur = conn.execute(statement, params)
        return cur.fetchall() if cur.description else []


def _reset_log(settings: Settings) -> None:
    """What a recreated sequence leaves: the marks' row as it was, above the new head."""
    _sql(settings, "DELETE FROM visibility_changes")
    _sql(settings, "ALTER SEQUENCE visibility_changes_seq RESTART")
    _sql(settings, "UPDATE visibility_verified SET upto = 3, checked = 3")


def _marks_read_again() -> None:
    """Past the interval after which a read also asks for the head and the mark."""
    time.sleep(MARKS_EVERY_S * 2)


def _fence(api: RunningApi) -> VisibilityFence:
    fence = api.app.state.visibility_fence
    assert isinstance(fence, VisibilityFence)
    return fence


@pytest.fixture
def scene(api_server: RunningApi, world: FeedWorld) -> Iterator[Scene]:
    s = Scene(api_server, world, posts=6)
    yield s
    s.close()


def test_entries_are_forgotten_only_when_the_verifier_releases_them(
        settings: Settings, api_server: RunningApi, scene: Scene) -> None:
    gone = scene.posts[0]
    assert scene.as_author.delete(f"/v1/posts/{gone}").status_code == 204
    assert gone not in scene.every_page()
    (seq,), = _sql(settings, "SELECT max(seq) FROM visibility_changes")
    held = len(_fence(api_server).changes)
    # The copy still shows the post: the entry stays however old it gets, until the
    # mark passes it; then the API forgets it (and the copy, which nobody repaired in
    # this test, decides again: what the verifier is there to prevent).
    _sql(settings, "UPDATE visibility_verified SET upto = %s, checked = %s", (seq - 1, seq - 1))
    _marks_read_again()
    assert gone not in scene.every_page()
    _sql(settings, "UPDATE visibility_verified SET upto = %s, checked = %s", (seq, seq))
    _sql(settings, "DELETE FROM visibility_changes WHERE seq <= %s", (seq,))
    _marks_read_again()
    assert gone in scene.every_page()
    assert len(_fence(api_server).changes) < held


def test_a_log_that_went_back_is_read_again_from_its_start(
        settings: Settings, api_server: RunningApi, scene: Scene) -> None:
    for post_id in scene.posts[:3]:
        assert scene.as_author.delete(f"/v1/posts/{post_id}").status_code == 204
    scene.every_page()
    assert _fence(api_server).changes.last_seq >= 3
    _reset_log(settings)
    # The block is entry 1 of the new log, below the last entry the process read.
    assert scene.as_author.put(f"/v1/users/{scene.reader}/block").status_code == 204
    assert _sql(settings, "SELECT seq FROM visibility_changes WHERE kind = 'block'") == [(1,)]
    _marks_read_again()   # the head is read with the marks (a restore also drops the connection)
    assert scene.every_page() == []
    assert scene.every_page(order="latest") == []
    _sql(settings, "UPDATE visibility_verified SET upto = 0, checked = 0")


def test_a_process_started_over_a_large_log_is_ready_only_once_it_has_read_it(
        settings: Settings, world: FeedWorld) -> None:
    # 35,000 entries (four chunks) of posts that do not exist, numbered like the triggers'.
    _sql(settings, "INSERT INTO visibility_changes (seq, kind, subject_id, object_id, hidden) "
                   "SELECT nextval('visibility_changes_seq'), 'post', g, 1, true "
                   "FROM generate_series(1, 35000) g")
    (head,), = _sql(settings, "SELECT max(seq) FROM visibility_changes")
    with running_api(settings) as api:
        fence = _fence(api)
        with httpx.Client(base_url=api.base_url, timeout=10) as client:
            # 503 ("the visibility log is being read") until a read has reached the head.
            ready = wait_until(lambda: (r := client.get("/readyz")).status_code == 200 and r,
                               timeout=60, message="/readyz")
            assert ready.json()["checks"]["visibility_log"] == "ok"
        assert fence.ready and fence.changes.last_seq >= head and len(fence.changes) >= 35_000
        scene = Scene(api, world, posts=3)
        try:
            assert scene.every_page() == scene.posts[::-1]
        finally:
            scene.close()
    _sql(settings, "DELETE FROM visibility_changes WHERE subject_id <= 35000 AND kind = 'post' "
                   "AND object_id = 1")


def test_past_the_bound_each_page_asks_postgres_and_hides_the_same(
        settings: Settings, world: FeedWorld) -> None:
    bounded = settings.model_copy(update={"visibility_max_entries": 4})
    with running_api(bounded) as api:
        scene = Scene(api, world, posts=8)
        try:
            for post_id in scene.posts[:5]:  # five entries: past the bound
                assert scene.as_author.delete(f"/v1/posts/{post_id}").status_code == 204
            shown = scene.every_page()
            assert shown == scene.posts[5:][::-1]
            metrics = httpx.get(f"{api.base_url}/metrics").text
            assert "feed_visibility_window_mode 1.0" in metrics
            assert len(_fence(api).changes) == 0
            assert scene.as_reader.delete(f"/v1/users/{scene.author}/follow").status_code == 204
            assert scene.every_page() == [] and scene.every_page(order="latest") == []
            # The verifier releases all but the unfollow's entry: back under half the
            # bound, the log is read again and the fold answers once more.
            (last,), = _sql(settings, "SELECT max(seq) FROM visibility_changes")
            _sql(settings, "UPDATE visibility_verified SET upto = %s, checked = %s", (last - 1, last - 1))
            _sql(settings, "DELETE FROM visibility_changes WHERE seq < %s", (last,))
            for _ in range(3):
                assert scene.every_page() == []
            assert "feed_visibility_window_mode 0.0" in httpx.get(f"{api.base_url}/metrics").text
            assert len(_fence(api).changes) == 1
        finally:
            scene.close()
