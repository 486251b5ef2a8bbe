"""Over real HTTP: a ``new_item`` whose write is held past the margin after its last check
is not written (the stream gets ``resync``); one written after a shorter hold carries a
``sent`` stamp read after the hold (services/api/stream/write_deadline.py).

The hold is an ASGI layer between the route's response and uvicorn that makes the next
empty body chunk wait, as uvicorn's ``send`` waits for a paused socket (a slow reader)
to drain before it writes: the stream sends that chunk right before an event's bytes.
"""
from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator

import pytest
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from services.api.app import create_app
from services.api.stream import session as stream_session
from services.shared.settings import Settings
from tests.support.api_server import RunningApi, new_user_id, serve_in_thread, stop_server
from tests.support.feed_world import FeedWorld
from tests.support.stream_api import DELIVERY_DEADLINE_S, next_new_item, open_stream, wait_ready

pytestmark = pytest.mark.integration
RESYNC_EVENT = {"event": "resync", "data": "{}"}
# Far above the 50 ms margin, so a held event is late however the host is loaded.
HOLD_S = 0.5


class SocketHold:
    """Armed from the test thread; the server's loop takes it at the next empty chunk."""

    def __init__(self) -> None:
        self._armed = threading.Event()
        self.hold_s = 0.0
        self.held_from: list[float] = []
        self.released_at: list[float] = []

    def arm(self, hold_s: float) -> None:
        self.hold_s = hold_s
        self._armed.set()

    def take(self) -> bool:
        if self._armed.is_set():
            self._armed.clear()
            return True
        return False


class HeldSocket:
    def __init__(self, app: ASGIApp, hold: SocketHold) -> None:
        self.app = app
        self.hold = hold

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") != "/v1/feed/stream":
            await self.app(scope, receive, send)
            return
        hold = self.hold

        async def held_send(message: Message) -> None:
            if (message["type"] == "http.response.body" and not message.get("body")
                    and message.get("more_body") and hold.take()):
                hold.held_from.append(time.time())
                await asyncio.sleep(hold.hold_s)
                hold.released_at.append(time.time())
            await send(message)

        await self.app(scope, receive, held_send)


@pytest.fixture(scope="module")
def held_api(settings: Settings) -> Iterator[tuple[RunningApi, SocketHold]]:
    fast = settings.model_copy(update={"stream_heartbeat_s": 0.5})
    app = create_app(fast)
    hold = SocketHold()
    app.add_middleware(HeldSocket, hold=hold)
    server, thread, base_url = serve_in_thread(app)
    try:
        yield RunningApi(base_url, fast, app), hold
    finally:
        stop_server(server, thread)


def _late_writes(api: RunningApi, outcome: str) -> float:
    value = api.app.state.metrics.registry.get_sample_value(
        "feed_stream_late_writes_total", {"outcome": outcome})
    return value or 0.0


def test_an_event_held_past_the_margin_is_not_written_and_the_stream_resyncs(
        held_api: tuple[RunningApi, SocketHold], world: FeedWorld) -> None:
    api, hold = held_api
    wait_ready(api)
    author, reader = new_user_id(), new_user_id()
    world.follow(reader, author)
    stream = open_stream(api, reader)
    refused, holds = _late_writes(api, "refused"), len(hold.released_at)
    try:
        hold.arm(HOLD_S)
        held = world.write(author, inbox_of=[reader])
        world.announce(held)
        assert stream.next_item(DELIVERY_DEADLINE_S) == RESYNC_EVENT
        assert len(hold.released_at) == holds + 1
        assert _late_writes(api, "refused") == refused + 1
        # The stream goes on: the next event, not held, is written, stamped.
        marker = world.write(author, inbox_of=[reader])
        world.announce(marker)
        event = next_new_item(stream, DELIVERY_DEADLINE_S)
        assert event is not None
        assert json.loads(event["data"])["post_id"] == str(marker.post_id)  # never `held`
        assert int(event["sent"]) > 0
    finally:
        stream.close()


def test_an_event_written_after_a_hold_is_stamped_after_it(
        held_api: tuple[RunningApi, SocketHold], world: FeedWorld,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """With a margin wider than the hold the event is written; its stamp says when its
    bytes went out, after the hold, not when it passed its check before it."""
    api, hold = held_api
    wait_ready(api)
    monkeypatch.setattr(stream_session, "WRITE_MARGIN_S", 60.0)  # read when a stream opens
    author, reader = new_user_id(), new_user_id()
    world.follow(reader, author)
    stream = open_stream(api, reader)
    holds = len(hold.released_at)
    try:
        hold.arm(HOLD_S)
        post = world.write(author, inbox_of=[reader])
        world.announce(post)
        event = next_new_item(stream, DELIVERY_DEADLINE_S)
        assert event is not None
        assert json.loads(event["data"])["post_id"] == str(post.post_id)
        assert len(hold.released_at) == holds + 1
        assert int(event["sent"]) >= int(hold.released_at[-1] * 1000)
    finally:
        stream.close()
