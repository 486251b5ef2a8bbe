"""The API app served for its SSE stream (``/v1/feed/stream``), and what the stream tests
do with one: wait for its stream consumer, open a stream, take the next ``new_item``."""
from __future__ import annotations

from collections.abc import Iterator

import httpx

from services.api.app import create_app
from services.shared.settings import Settings

from .api_server import RunningApi, serve_in_thread, stop_server
from .feed_world import SseReader
from .waiting import wait_until

# Freshness target (docs/architecture.md, "What the specification fixes"): commit to
# visible p95 <= 1.5 s; the event leg is a part.
DELIVERY_DEADLINE_S = 5.0


def serve_stream_api(settings: Settings) -> Iterator[RunningApi]:
    """An API app with its own Cassandra session and Kafka consumer, served until the
    generator is closed (``yield from`` it in a fixture)."""
    # Short heartbeats: a closed test client is noticed (and its lease freed) quickly.
    fast = settings.model_copy(update={"stream_heartbeat_s": 0.5})
    app = create_app(fast)
    server, thread, base_url = serve_in_thread(app)
    try:
        yield RunningApi(base_url, fast, app)
    finally:
        stop_server(server, thread)


def wait_ready(api: RunningApi) -> None:
    with httpx.Client(base_url=api.base_url) as client:
        wait_until(lambda: client.get("/readyz").status_code == 200, timeout=30,
                   message="the stream consumer to be ready")


def wait_routed(api: RunningApi, reader: int, author: int) -> None:
    """Wait until ``api``'s stream hub routes ``author``'s events to ``reader``: a follow
    made after the stream opened reaches the hub's index through a serving-changes
    notice (services/api/stream/hub.py, ``follows_changed``)."""
    hub = api.app.state.stream_hub
    wait_until(lambda: hub.routes(author, reader), timeout=DELIVERY_DEADLINE_S,
               message=f"the hub to route author {author}'s events to reader {reader}")


def open_stream(api: RunningApi, reader: int, **kwargs: object) -> SseReader:
    stream = SseReader(api.client(reader, timeout=60), **kwargs)  # type: ignore[arg-type]
    assert stream.connected.wait(10), "stream did not open"
    return stream


def next_new_item(stream: SseReader, timeout: float) -> dict[str, str] | None:
    while True:
        event = stream.next_item(timeout)
        if event is None or event.get("event") == "new_item":
            return event
