"""A stream event is written with its ``sent`` stamp read when its bytes go out, at most
the margin after its last check, or replaced by ``resync`` (services/api/stream/write_deadline.py)."""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

from sse_starlette import ServerSentEvent
from starlette.types import Message

from services.api.stream.write_deadline import RESYNC, DeadlineResponse, WriteDeadline
from services.api.visibility.commit_wait import WRITE_MARGIN_S

EPOCH_S = 1_800_000_000.0   # wall clock at monotonic 0
RESYNC_BYTES = RESYNC.encode()


class Clock:
    """A monotonic clock and the wall clock that moves with it."""

    def __init__(self) -> None:
        self.now = 10_000.0

    def monotonic(self) -> float:
        return self.now

    def wall(self) -> float:
        return EPOCH_S + self.now


class Server:
    """The server's ``send``: records what was written and when; ``hold`` says how long the
    next empty chunk waits (a paused socket: uvicorn waits before writing), ``slow`` how
    long writing the event itself takes after it is written (a pause within that step)."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.written: list[tuple[bytes, float]] = []
        self.hold_s = 0.0
        self.slow_s = 0.0

    async def send(self, message: Message) -> None:
        body = message.get("body", b"")
        if message["type"] == "http.response.body" and body == b"" and message.get("more_body"):
            self.clock.now += self.hold_s
        self.written.append((body, self.clock.wall()))
        if b"new_item" in body:
            self.clock.now += self.slow_s


def _deadline(clock: Clock, late: list[str]) -> WriteDeadline:
    return WriteDeadline(WRITE_MARGIN_S, on_late=late.append, monotonic=clock.monotonic,
                         clock=clock.wall)


async def _write(writes: WriteDeadline, send: Callable[[Message], Awaitable[None]],
                 checked_at: float) -> None:
    """What sse-starlette does with a yielded event: encode it, then send its bytes."""
    event = writes.event('{"post_id":"1"}', event="new_item", id="b-1", checked_at=checked_at)
    await send({"type": "http.response.body", "body": event.encode(), "more_body": True})


def _stamp_ms(body: bytes) -> int:
    first = body.split(b"\r\n", 1)[0]
    assert first.startswith(b": sent "), body
    return int(first.removeprefix(b": sent "))


def test_on_time_the_stamp_is_read_after_the_socket_was_waited_out() -> None:
    clock, late = Clock(), []
    server = Server(clock)
    server.hold_s = WRITE_MARGIN_S / 2   # a paused socket, within the margin
    writes = _deadline(clock, late)
    checked = clock.now
    asyncio.run(_write(writes, writes.wrap(server.send), checked))
    (preflight, _), (body, written_at) = server.written
    assert preflight == b""                         # nothing of the event before the wait
    assert b"event: new_item" in body and b"id: b-1" in body
    assert _stamp_ms(body) == int(written_at * 1000)                     # when it was written,
    assert _stamp_ms(body) > int((EPOCH_S + checked) * 1000)             # not when checked
    assert late == []


def test_an_event_whose_write_comes_past_the_margin_is_replaced_by_resync() -> None:
    clock, late = Clock(), []
    server = Server(clock)
    server.hold_s = WRITE_MARGIN_S * 4   # the socket stays paused past the margin
    writes = _deadline(clock, late)
    asyncio.run(_write(writes, writes.wrap(server.send), clock.now))
    assert [body for body, _ in server.written] == [b"", RESYNC_BYTES]
    assert late == ["refused"]


def test_a_check_older_than_the_margin_when_the_bytes_are_sent_is_refused() -> None:
    """A pause between the check and the send (a GC, a busy step) counts too."""
    clock, late = Clock(), []
    server = Server(clock)
    writes = _deadline(clock, late)
    asyncio.run(_write(writes, writes.wrap(server.send), clock.now - WRITE_MARGIN_S * 1.5))
    assert [body for body, _ in server.written] == [b"", RESYNC_BYTES]
    assert late == ["refused"]


def test_a_write_that_returns_past_the_deadline_is_counted_overran() -> None:
    clock, late = Clock(), []
    server = Server(clock)
    server.slow_s = WRITE_MARGIN_S * 2
    writes = _deadline(clock, late)
    asyncio.run(_write(writes, writes.wrap(server.send), clock.now))
    assert b"new_item" in server.written[-1][0]
    assert late == ["overran"]


def test_other_messages_pass_unchanged() -> None:
    clock, late = Clock(), []
    server = Server(clock)
    writes = _deadline(clock, late)
    send = writes.wrap(server.send)
    heartbeat = ServerSentEvent(comment="heartbeat").encode()
    other = ServerSentEvent("{}", event="new_item", id="b-2").encode()

    async def scenario() -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": heartbeat, "more_body": True})
        await send({"type": "http.response.body", "body": RESYNC_BYTES, "more_body": True})
        # Bytes equal to an event's but not its encoding (sse-starlette sends the very
        # object it encoded) are someone else's: no wait, no stamp.
        writes.event("{}", event="new_item", id="b-2", checked_at=clock.now).encode()
        await send({"type": "http.response.body", "body": other, "more_body": True})

    asyncio.run(scenario())
    # The headers (no body), then the three bodies as given: no empty chunk before any.
    assert [body for body, _ in server.written] == [b"", heartbeat, RESYNC_BYTES, other]
    assert late == []


def _run_response(writes: WriteDeadline, server: Server, checked_at: Callable[[], float]) -> None:
    """A ``DeadlineResponse`` served to the end by sse-starlette, as the route returns it."""

    async def events() -> AsyncIterator[ServerSentEvent]:
        yield ServerSentEvent(comment="connected")
        yield writes.event('{"post_id":"7"}', event="new_item", id="b-7", checked_at=checked_at())

    async def receive() -> Message:
        await asyncio.Event().wait()   # the client never disconnects
        raise AssertionError

    response = DeadlineResponse(events(), writes)
    asyncio.run(response({"type": "http", "method": "GET"}, receive, server.send))


def test_through_sse_starlette_the_event_is_written_stamped_after_the_wait() -> None:
    clock, late = Clock(), []
    server = Server(clock)
    server.hold_s = WRITE_MARGIN_S / 2
    _run_response(_deadline(clock, late), server, clock.monotonic)
    bodies = [body for body, _ in server.written]
    assert bodies[1] == ServerSentEvent(comment="connected").encode()
    assert bodies[2] == b""
    assert b"event: new_item" in bodies[3]
    assert _stamp_ms(bodies[3]) == int(server.written[3][1] * 1000)
    assert late == []


def test_through_sse_starlette_a_late_event_becomes_resync() -> None:
    clock, late = Clock(), []
    server = Server(clock)
    server.hold_s = WRITE_MARGIN_S * 4
    _run_response(_deadline(clock, late), server, clock.monotonic)
    bodies = [body for body, _ in server.written]
    assert bodies[2:4] == [b"", RESYNC_BYTES]
    assert not any(b"new_item" in body for body in bodies)
    assert late == ["refused"]
