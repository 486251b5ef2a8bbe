"""An event's write held to its last check: stamped as its bytes go out, or not written.

The route checks a ``new_item`` (``EligibilityGate.still_allows``) and yields it; sse-starlette
encodes it and hands the bytes to ASGI ``send``. That is not yet the write: uvicorn's
``send`` first waits while the socket is paused (a slow reader's back-pressure) and only
then writes to the transport, and a GC pause can fall anywhere. Commit wait
(``visibility/commit_wait.py``) allows ``WRITE_MARGIN_S`` between the check and the write, and
the fault suite's checker times the event by its ``: sent <Unix ms>`` comment. So the
response's ``send`` is wrapped (``DeadlineResponse``) and, for each checked event:

1. any back-pressure is waited out first, with an empty body chunk: nothing of the event
   is written yet (uvicorn writes nothing for it, h11 and httptools alike);
2. then, if more than the margin has passed since the check, the event is not written:
   ``event: resync`` goes in its place (the client refetches its first page, judged on a
   read that goes out after it asks), counted ``refused``;
3. otherwise the stamp is read and the bytes, stamp first, are handed to the server's
   ``send``, which writes them to the transport in the same step (the socket was just
   writable, nothing is awaited in between). The stamp is when the bytes were written,
   at most the margin after the check;
4. a write whose ``send`` still returned past that deadline (a GC pause in that step, or
   a server that waits after writing) went out, perhaps later than its stamp: counted
   ``overran`` (``feed_stream_late_writes_total``), which should stay at 0.

Cost per event: one more pass of an empty chunk through the ASGI send chain, two
monotonic reads, one wall-clock read and a bytes concatenation.
"""
from __future__ import annotations

import time
from collections.abc import AsyncIterable, Callable, Mapping

from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.types import Message, Receive, Scope, Send

from ..visibility.commit_wait import WRITE_MARGIN_S

SEP = "\r\n"  # sse-starlette's default separator, used by every event of the stream
RESYNC = ServerSentEvent("{}", event="resync", sep=SEP)
_RESYNC_BYTES = RESYNC.encode()


def _ignore(outcome: str) -> None:
    pass


class CheckedEvent(ServerSentEvent):
    """An event that passed its last check at ``checked_at`` (``WriteDeadline``'s monotonic
    clock). Encoding it, which sse-starlette does right before sending the bytes, tells
    the stream's ``WriteDeadline`` to expect them: it writes them stamped, or a
    ``resync`` in their place."""

    def __init__(self, data: str, *, event: str, id: str, checked_at: float,
                 writes: WriteDeadline) -> None:
        super().__init__(data, event=event, id=id, sep=SEP)
        self.checked_at = checked_at
        self._writes = writes

    def encode(self) -> bytes:
        body = super().encode()
        self._writes.expect(body, self.checked_at)
        return body


class WriteDeadline:
    """One stream's writes of checked events (see the module docstring). ``on_late`` is
    told ``refused`` (a resync sent instead) or ``overran`` (written past the deadline)."""

    def __init__(self, margin_s: float = WRITE_MARGIN_S, *,
                 on_late: Callable[[str], None] = _ignore,
                 monotonic: Callable[[], float] = time.monotonic,
                 clock: Callable[[], float] = time.time) -> None:
        self.margin_s = margin_s
        self.monotonic = monotonic
        self._on_late = on_late
        self._clock = clock
        self._expected: tuple[bytes, float] | None = None

    def event(self, data: str, *, event: str, id: str, checked_at: float) -> CheckedEvent:
        """The event to yield; ``checked_at`` read from ``self.monotonic`` right after the
        check passed, nothing awaited in between."""
        return CheckedEvent(data, event=event, id=id, checked_at=checked_at, writes=self)

    def expect(self, body: bytes, checked_at: float) -> None:
        self._expected = (body, checked_at)

    def wrap(self, send: Send) -> Send:
        async def deadline_send(message: Message) -> None:
            expected = self._expected
            # The very bytes the event encoded to (sse-starlette sends what it encoded,
            # in the same step): anything else (a comment, a resync, the headers) passes.
            if expected is None or message.get("body") is not expected[0]:
                await send(message)
                return
            self._expected = None
            body, checked_at = expected
            # Waits out a paused socket; writes nothing (a fresh dict: layers may edit it).
            await send({"type": "http.response.body", "body": b"", "more_body": True})
            deadline = checked_at + self.margin_s
            if self.monotonic() > deadline:
                self._on_late("refused")
                await send({**message, "body": _RESYNC_BYTES})
                return
            stamp = f": sent {int(self._clock() * 1000)}{SEP}".encode()
            await send({**message, "body": stamp + body})
            if self.monotonic() > deadline:
                self._on_late("overran")

        return deadline_send


class DeadlineResponse(EventSourceResponse):
    """``EventSourceResponse`` whose ``send`` goes through ``writes`` (``WriteDeadline``)."""

    def __init__(self, content: AsyncIterable[ServerSentEvent], writes: WriteDeadline,
                 headers: Mapping[str, str] | None = None) -> None:
        super().__init__(content, headers=headers)
        self.writes = writes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await super().__call__(scope, receive, self.writes.wrap(send))
