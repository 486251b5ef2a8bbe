"""GET /v1/feed/stream over real HTTP: delivery, eligibility, resume, cap, several processes."""
from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from services.shared.settings import Settings
from tests.support.api_server import RunningApi, new_user_id
from tests.support.feed_world import FeedWorld
from tests.support.stream_api import (DELIVERY_DEADLINE_S, next_new_item, open_stream,
                                      serve_stream_api, wait_ready, wait_routed)
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration
# How long a test waits to be sure an event did NOT arrive (a later event that did arrive
# proves the earlier one was processed, so this only bounds a broken run).
ABSENCE_DEADLINE_S = 10.0


@pytest.fixture(scope="module")
def stream_api(settings: Settings) -> Iterator[RunningApi]:
    """An API app with its own Cassandra session and Kafka consumer."""
    yield from serve_stream_api(settings)


@pytest.fixture(scope="module")
def second_api(settings: Settings) -> Iterator[RunningApi]:
    """A second, independent API app: what another process would be."""
    yield from serve_stream_api(settings)


def test_new_post_reaches_a_connected_follower_and_never_a_blocked_reader(
        stream_api: RunningApi, world: FeedWorld) -> None:
    wait_ready(stream_api)
    author, follower, blocked = new_user_id(), new_user_id(), new_user_id()
    world.follow(follower, author)
    world.follow(blocked, author)
    world.block(author, blocked)
    fan, shunned = open_stream(stream_api, follower), open_stream(stream_api, blocked)
    try:
        post = world.write(author, inbox_of=[follower, blocked])  # a stale row for `blocked`
        world.announce(post)
        event = next_new_item(fan, DELIVERY_DEADLINE_S)
        assert event is not None, "no new_item within the deadline"
        assert json.loads(event["data"]) == {"post_id": str(post.post_id), "feed_version": "live"}
        assert event["id"]
        # A later event the blocked reader may see proves its stream processed the first.
        other = new_user_id()
        world.follow(blocked, other)
        wait_routed(stream_api, blocked, other)
        marker = world.write(other, inbox_of=[blocked])
        world.announce(marker)
        seen = next_new_item(shunned, ABSENCE_DEADLINE_S)
        assert seen is not None and json.loads(seen["data"])["post_id"] == str(marker.post_id)
    finally:
        fan.close()
        shunned.close()


def test_celebrity_post_reaches_followers_connected_to_any_process(
        stream_api: RunningApi, second_api: RunningApi, world: FeedWorld) -> None:
    wait_ready(stream_api)
    wait_ready(second_api)
    star, here, there = new_user_id(), new_user_id(), new_user_id()
    world.follow(here, star)
    world.follow(there, star)
    world.make_celebrity(star)
    with second_api.client(there) as client:  # the version a page shows: the stream takes it
        version = client.get("/v1/feed").json()["feed_version"]
    a, b = open_stream(stream_api, here), open_stream(second_api, there, params={"feed_version": version})
    try:
        post = world.write(star)
        world.announce(post)
        got_a, got_b = next_new_item(a, DELIVERY_DEADLINE_S), next_new_item(b, DELIVERY_DEADLINE_S)
        assert got_a is not None and got_b is not None
        assert json.loads(got_a["data"])["post_id"] == str(post.post_id)
        assert json.loads(got_b["data"]) == {"post_id": str(post.post_id), "feed_version": version}
    finally:
        a.close()
        b.close()


def test_reconnect_with_last_event_id_gets_the_missed_events(stream_api: RunningApi,
                                                             world: FeedWorld) -> None:
    wait_ready(stream_api)
    author, reader = new_user_id(), new_user_id()
    world.follow(reader, author)
    first_stream = open_stream(stream_api, reader)
    first = world.write(author, inbox_of=[reader])
    world.announce(first)
    event = next_new_item(first_stream, DELIVERY_DEADLINE_S)
    assert event is not None
    first_stream.close()
    missed = world.write(author, inbox_of=[reader])
    world.announce(missed)
    hub = stream_api.app.state.stream_hub
    wait_until(lambda: not hub.resume(reader, event["id"]).resync
               and hub.resume(reader, event["id"]).events, timeout=DELIVERY_DEADLINE_S,
               message="the missed event to be buffered")
    again = open_stream(stream_api, reader, headers={"Last-Event-ID": event["id"]})
    try:
        replayed = next_new_item(again, DELIVERY_DEADLINE_S)
        assert replayed is not None and json.loads(replayed["data"])["post_id"] == str(missed.post_id)
    finally:
        again.close()
    unknown = open_stream(stream_api, reader, headers={"Last-Event-ID": "not-from-here-1"})
    try:
        assert unknown.next_item(DELIVERY_DEADLINE_S) == {"event": "resync", "data": "{}"}
    finally:
        unknown.close()


def test_streams_per_user_are_capped(stream_api: RunningApi) -> None:
    reader = new_user_id()
    cap = stream_api.settings.stream_max_per_user
    streams = [open_stream(stream_api, reader) for _ in range(cap)]
    try:
        assert all(s.status == 200 for s in streams)
        with stream_api.client(reader) as client:
            response = client.get("/v1/feed/stream")
        assert response.status_code == 429
        assert response.json()["type"].endswith("/too-many-streams")
    finally:
        for s in streams:
            s.close()
    with stream_api.client(reader) as client:
        def slot_freed() -> bool:
            with client.stream("GET", "/v1/feed/stream") as response:
                return response.status_code == 200
        wait_until(slot_freed, timeout=10, message="closed streams to free their slots")
