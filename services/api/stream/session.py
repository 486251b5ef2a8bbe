"""One open stream of ``GET /v1/feed/stream``, from its ``connected`` comment to its end.

The route (``routes/stream.py``) authenticates the reader and takes a lease under the
per-user cap; ``open_session`` then connects the reader to the hub, records the read, and
holds what a reconnect with ``Last-Event-ID`` missed. ``StreamSession.events`` is the
response's body: the missed events, re-checked (or ``resync``), then each event as it
arrives, checked again against the visibility log right before it is written, a comment
heartbeat every ``heartbeat_s`` that refreshes the lease (and, every
``FOLLOWED_REFRESH_HEARTBEATS``, the reader's follows in the hub), and ``resync`` when
the hub's consumer lost events. When it ends, the stream leaves the hub and frees its
lease.

Each ``new_item`` is written by ``write_deadline``: with a comment line
``sent <Unix ms>`` read as its bytes are written, at most ``WRITE_MARGIN_S`` after its
last check, or not at all (``resync`` in its place) when its write would come later.
"""
from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from sse_starlette import ServerSentEvent

from ..visibility.commit_wait import WRITE_MARGIN_S
from ..visibility.fence import FenceUnavailable

from .gate import EligibilityGate
from .hub import ResyncNeeded, Resume, StreamEvent, StreamHub, StreamItem
from .leases import StreamLeases
from .metrics import StreamMetrics
from .write_deadline import CheckedEvent, WriteDeadline

log = logging.getLogger(__name__)

# Routing of author events follows the reader's follows; re-read them this often.
FOLLOWED_REFRESH_HEARTBEATS = 2


class StreamUnavailable(RuntimeError):
    """The hub could not open the stream; its lease was released."""


def _new_item(event: StreamEvent, feed_version: str, writes: WriteDeadline,
              checked_at: float) -> CheckedEvent:
    """The event, passed its last check at ``checked_at``: ``writes`` adds the comment line
    ``sent <Unix ms>`` when its bytes are written, or sends ``resync`` instead when that
    comes more than the margin after the check. Clients ignore comments; the fault
    suite's checker reads it to tell an event written after an acknowledgement from one
    received after it."""
    data = json.dumps({"post_id": str(event.post_id), "feed_version": feed_version},
                      separators=(",", ":"))
    return writes.event(data, event="new_item", id=event.event_id, checked_at=checked_at)


class StreamSession:
    """One reader's open stream: ``events()`` is the response's body, ``writes`` the
    ``WriteDeadline`` its response sends through."""

    def __init__(self, reader_id: int, lease: str, queue: asyncio.Queue[StreamItem],
                 resume: Resume | None, feed_version: str, hub: StreamHub,
                 gate: EligibilityGate, leases: StreamLeases, metrics: StreamMetrics,
                 heartbeat_s: float, on_read: Callable[[int], Awaitable[object]] | None) -> None:
        self.reader_id = reader_id
        self.writes = WriteDeadline(
            WRITE_MARGIN_S, on_late=lambda outcome: metrics.stream_late_writes.labels(outcome).inc())
        self._lease = lease
        self._queue = queue
        self._resume = resume
        self._version = feed_version
        self._hub = hub
        self._gate = gate
        self._leases = leases
        self._metrics = metrics
        self._heartbeat_s = heartbeat_s
        self._on_read = on_read

    async def events(self) -> AsyncIterator[ServerSentEvent]:
        reader_id, queue, hub, gate = self.reader_id, self._queue, self._hub, self._gate
        resume, version, writes, metrics = self._resume, self._version, self.writes, self._metrics
        beats = 0
        try:
            yield ServerSentEvent(comment="connected")
            if resume is not None and resume.resync:
                yield ServerSentEvent("{}", event="resync")
            for missed in resume.events if resume is not None else []:
                try:
                    allowed = (await gate.allows(reader_id, missed.post_id, missed.author_id)
                               and await gate.still_allows(reader_id, missed.post_id,
                                                           missed.author_id))
                    checked_at = writes.monotonic()  # in the step the check returned
                except FenceUnavailable:
                    yield ServerSentEvent("{}", event="resync")
                    break
                if allowed:
                    yield _new_item(missed, version, writes, checked_at)
            while True:
                try:
                    event = await asyncio.wait_for(queue.get(), self._heartbeat_s)
                except asyncio.TimeoutError:
                    if not hub.is_open(reader_id, queue):
                        return
                    beats += 1
                    try:
                        await self._leases.refresh(reader_id, self._lease)
                        if self._on_read is not None:
                            await self._on_read(reader_id)
                        if beats % FOLLOWED_REFRESH_HEARTBEATS == 0:
                            await hub.refresh_followed(reader_id)
                    except Exception:  # noqa: BLE001 - keep streaming; the lease has slack
                        log.warning("stream heartbeat upkeep failed", exc_info=True)
                    yield ServerSentEvent(comment="heartbeat")
                    continue
                if isinstance(event, ResyncNeeded):
                    yield ServerSentEvent("{}", event="resync")
                    continue
                # Checked when it arrived; the log is read again now, so a delete, block
                # or unfollow acknowledged while it waited in the queue still holds it back.
                try:
                    if not await gate.still_allows(reader_id, event.post_id, event.author_id):
                        metrics.skipped.labels("fenced").inc()
                        continue
                    checked_at = writes.monotonic()  # in the step the check returned
                except FenceUnavailable:
                    # Not judged, so not sent: the client refetches its first page, which
                    # answers once the log can be read again.
                    yield ServerSentEvent("{}", event="resync")
                    continue
                # Written (stamped) only while within the margin of this check, else
                # replaced by resync: see write_deadline.py.
                yield _new_item(event, version, writes, checked_at)
        finally:
            hub.disconnect(reader_id, queue)
            metrics.streams.dec()
            self._leases.release(reader_id, self._lease)


async def open_session(reader_id: int, lease: str, hub: StreamHub, gate: EligibilityGate,
                       leases: StreamLeases, metrics: StreamMetrics, heartbeat_s: float, *,
                       feed_version: str | None, last_event_id: str | None,
                       on_read: Callable[[int], Awaitable[object]] | None) -> StreamSession:
    """The reader's stream on ``lease``, connected to the hub. ``on_read`` records the read
    (an open stream is reading, like a page) at the start and at every heartbeat. Raises
    ``StreamUnavailable`` (the lease released) when the hub cannot connect the reader."""
    try:
        queue = await hub.connect(reader_id)
    except Exception as exc:  # noqa: BLE001
        leases.release(reader_id, lease)
        raise StreamUnavailable("the stream could not be opened") from exc
    if on_read is not None:
        await on_read(reader_id)
    resume = hub.resume(reader_id, last_event_id) if last_event_id else None
    metrics.streams.inc()
    return StreamSession(reader_id, lease, queue, resume, feed_version or "live", hub, gate,
                         leases, metrics, heartbeat_s, on_read)
