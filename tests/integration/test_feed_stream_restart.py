"""A restart of the API's stream consumer never leaves open streams with a silent gap.

The consumer is made to fail inside its poll loop (as a broker error would) and held
down while an event is produced; then it comes back. A short gap is replayed; a gap the
consumer will not replay (the limit forced to 0 here) sends ``resync`` to every open
stream, and an id from before the gap no longer resumes.
"""
from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from services.api.stream import consumer as stream_consumer
from services.shared.settings import Settings
from tests.support.api_server import RunningApi, new_user_id
from tests.support.feed_world import FeedWorld
from tests.support.stream_api import (DELIVERY_DEADLINE_S, next_new_item, open_stream,
                                      serve_stream_api, wait_ready)
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration
RESYNC_EVENT = {"event": "resync", "data": "{}"}
# The consumer notices the injected failure at its next poll (<= 0.5 s) and restarts
# after a backoff of at most 0.5 s on a first failure.
OUTAGE_DEADLINE_S = 10.0


@pytest.fixture(scope="module")
def restart_api(settings: Settings) -> Iterator[RunningApi]:
    """An API app of its own: these tests break its consumer on purpose."""
    yield from serve_stream_api(settings)


class ConsumerOutage:
    """Fails the app's stream consumer once and holds the new one before it positions."""

    def __init__(self, api: RunningApi, monkeypatch: pytest.MonkeyPatch) -> None:
        self.down = threading.Event()  # the consumer failed and a new one waits
        self._released = threading.Event()
        hub = api.app.state.stream_hub
        expire_idle, position = hub.expire_idle, stream_consumer._position_consumer
        failed = threading.Event()

        def failing_once() -> None:
            if not failed.is_set():
                failed.set()
                raise ConnectionError("injected: the consumer lost its broker")
            expire_idle()

        async def held(*args: Any, **kwargs: Any) -> None:
            self.down.set()
            while not self._released.is_set():
                await asyncio.sleep(0.02)
            await position(*args, **kwargs)

        monkeypatch.setattr(stream_consumer, "_position_consumer", held)
        monkeypatch.setattr(hub, "expire_idle", failing_once)
        wait_until(self.down.is_set, timeout=OUTAGE_DEADLINE_S, message="the consumer to fail")

    def end(self) -> None:
        self._released.set()


def _restarts(api: RunningApi, outcome: str) -> float:
    value = api.app.state.metrics.registry.get_sample_value(
        "feed_stream_consumer_restarts_total", {"outcome": outcome})
    return value or 0.0


def test_a_restarted_consumer_replays_the_events_open_streams_missed(
        restart_api: RunningApi, world: FeedWorld, monkeypatch: pytest.MonkeyPatch) -> None:
    wait_ready(restart_api)
    author, reader = new_user_id(), new_user_id()
    world.follow(reader, author)
    stream = open_stream(restart_api, reader)
    replayed_before = _restarts(restart_api, "replayed")
    try:
        outage = ConsumerOutage(restart_api, monkeypatch)
        missed = world.write(author, inbox_of=[reader])
        world.announce(missed)  # produced while no consumer runs
        outage.end()
        event = next_new_item(stream, DELIVERY_DEADLINE_S)
        assert event is not None, "the event produced during the restart was lost"
        assert json.loads(event["data"])["post_id"] == str(missed.post_id)
        assert _restarts(restart_api, "replayed") == replayed_before + 1
    finally:
        stream.close()


def test_a_gap_the_consumer_does_not_replay_sends_resync_to_every_open_stream(
        restart_api: RunningApi, world: FeedWorld, monkeypatch: pytest.MonkeyPatch) -> None:
    wait_ready(restart_api)
    plan = stream_consumer.plan_restart
    monkeypatch.setattr(stream_consumer, "plan_restart",
                        lambda consumed, earliest, latest, _limit: plan(consumed, earliest, latest, 0))
    author, reader, other = new_user_id(), new_user_id(), new_user_id()
    world.follow(reader, author)
    world.follow(other, author)
    stream, other_stream = open_stream(restart_api, reader), open_stream(restart_api, other)
    resyncs_before = _restarts(restart_api, "resync")
    try:
        before = world.write(author, inbox_of=[reader])
        world.announce(before)  # to both: they follow its author
        seen = next_new_item(stream, DELIVERY_DEADLINE_S)
        assert seen is not None
        assert next_new_item(other_stream, DELIVERY_DEADLINE_S) is not None
        outage = ConsumerOutage(restart_api, monkeypatch)
        missed = world.write(author, inbox_of=[reader, other])
        world.announce(missed)
        outage.end()
        assert stream.next_item(DELIVERY_DEADLINE_S) == RESYNC_EVENT
        assert other_stream.next_item(DELIVERY_DEADLINE_S) == RESYNC_EVENT
        assert _restarts(restart_api, "resync") == resyncs_before + 1
        # The stream goes on after the resync.
        after = world.write(author, inbox_of=[reader])
        world.announce(after)
        event = next_new_item(stream, DELIVERY_DEADLINE_S)
        assert event is not None and json.loads(event["data"])["post_id"] == str(after.post_id)
    finally:
        stream.close()
        other_stream.close()
    again = open_stream(restart_api, reader, headers={"Last-Event-ID": seen["id"]})
    try:
        assert again.next_item(DELIVERY_DEADLINE_S) == RESYNC_EVENT, \
            "an id from before the gap must not resume past it"
    finally:
        again.close()
