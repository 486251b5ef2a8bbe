"""End to end: a reader who stops reading is flagged by the fan-out worker's own sweeper
(its timer, in the worker process), gets no inbox rows, and on return is served at once
while the fan-out worker regenerates their inbox on the API's ``reader_returned`` event.
The system runs with 1 s activity periods and ``INACTIVE_AFTER_S`` (conftest.py);
nothing is written to a store by the test."""
from __future__ import annotations

import time

import pytest

from deploy.lag import scrape
from tests.support.waiting import wait_until
from tests.support.feed_world import feed_ids
from .conftest import (INACTIVE_AFTER_S, VISIBLE_S, System, feed, follow_authors, inbox_post_ids,
                       new_users, post)


pytestmark = pytest.mark.e2e


def _state(system: System, reader: int) -> str | None:
    row = system.session().execute("SELECT state FROM reader_activity WHERE reader_id = %s",
                                   (reader,)).one()
    return row.state if row else None


def _skipped_rows(system: System) -> float:
    return sum(v for _l, v in scrape(system.settings.fanout_metrics_port)
               .get("feed_fanout_inactive_rows_skipped_total", []))


def test_an_inactive_reader_gets_no_rows_and_comes_back_to_a_full_feed(system: System) -> None:
    author, idle, active = new_users(system, 3)
    follow_authors(system, idle, [author])
    follow_authors(system, active, [author])
    with system.client(idle) as r:
        assert feed(r) == []  # the read the API records
    started = time.monotonic()
    wait_until(lambda: _state(system, idle) == "idle", timeout=INACTIVE_AFTER_S + 30, interval=0.5,
               message="the fan-out's sweeper to flag the reader")
    print(f"flagged {time.monotonic() - started:.1f} s after the last read")
    skipped = _skipped_rows(system)
    with system.client(author) as a:
        post_id = post(a, "while you were away")
    wait_until(lambda: post_id in inbox_post_ids(system, active), timeout=VISIBLE_S, interval=0.2,
               message="the post in the active follower's inbox")
    assert post_id not in inbox_post_ids(system, idle)
    assert _skipped_rows(system) - skipped == 1

    with system.client(idle) as r:
        page = r.get("/v1/feed").json()
        assert "regenerating" in page.get("warnings", [])
        assert feed_ids(page) == [post_id]  # at once, from the author's partition
        wait_until(lambda: "regenerating" not in r.get("/v1/feed").json().get("warnings", []),
                   timeout=VISIBLE_S, interval=0.2, message="the inbox to be regenerated")
        assert post_id in inbox_post_ids(system, idle)
        assert _state(system, idle) == "active"
        with system.client(author) as a:
            again = post(a, "welcome back")
        wait_until(lambda: again in inbox_post_ids(system, idle), timeout=VISIBLE_S, interval=0.2,
                   message="the next post in the returning reader's inbox")
        assert feed(r)[:2] == [again, post_id]
