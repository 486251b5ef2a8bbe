"""``GET /v1/feed/stream``: server-sent ``new_item`` events for the caller's feed.

Events are ``event: new_item``, ``id: <boot>-<seq>``, ``data: {"post_id", "feed_version"}``
(``feed_version`` echoes the query parameter: the snapshot the client is showing, so it
knows the item belongs above that list; ``live`` when not given). A comment heartbeat
is sent every ``Settings.stream_heartbeat_s`` and refreshes the stream's lease. A client
reconnecting with ``Last-Event-ID`` gets the events it missed from this process's
buffer, re-checked, or an ``event: resync`` telling it to refetch its first page; an open
stream also gets ``resync`` when the hub's consumer lost events it cannot replay. More
than ``Settings.stream_max_per_user`` open streams gives a 429 problem.

Each ``new_item`` is written by ``stream.write_deadline``: with a comment line
``sent <Unix ms>`` read as its bytes are written, at most ``WRITE_MARGIN_S`` after its
last check, or not at all (``resync`` in its place) when its write would come later.
"""
from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Header, Query, Request
from sse_starlette import EventSourceResponse, ServerSentEvent

from services.api.feed.fence import FenceUnavailable
from services.api.feed.snapshot import MAX_VERSION_CHARS
from services.api.http.auth import CurrentUser
from services.api.http.problems import UNAVAILABLE, ProblemError, ProblemKind, problem_responses

from ..feed.commit_wait import WRITE_MARGIN_S
from ..stream.hub import ResyncNeeded, StreamEvent, StreamHub
from ..stream.write_deadline import CheckedEvent, DeadlineResponse, WriteDeadline

log = logging.getLogger(__name__)
router = APIRouter(tags=["feed"])

TOO_MANY_STREAMS = ProblemKind("too-many-streams", 429, "Too many open streams")
# Routing of author events follows the reader's follows; re-read them this often.
FOLLOWED_REFRESH_HEARTBEATS = 2


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


@router.get("/v1/feed/stream", response_class=EventSourceResponse,
            responses=problem_responses(401, 429, 503))
async def feed_stream(
        request: Request, user: CurrentUser,
        last_event_id: Annotated[str | None, Header(alias="Last-Event-ID", max_length=64)] = None,
        feed_version: Annotated[str | None, Query(max_length=MAX_VERSION_CHARS,
                                                  pattern=r"^[A-Za-z0-9-]+$")] = None,
) -> EventSourceResponse:
    """Open the caller's stream of new feed items."""
    state = request.app.state
    hub: StreamHub | None = getattr(state, "stream_hub", None)
    if hub is None:
        raise ProblemError(UNAVAILABLE, "the stream is not available", headers={"Retry-After": "1"})
    settings = state.settings
    reader_id = user.user_id
    try:
        lease = await state.stream_leases.try_open(reader_id, settings.stream_max_per_user)
    except Exception as exc:  # noqa: BLE001 - store down: no stream, say so
        raise ProblemError(UNAVAILABLE, "the stream cap could not be checked",
                           headers={"Retry-After": "1"}) from exc
    if lease is None:
        raise ProblemError(TOO_MANY_STREAMS,
                           f"at most {settings.stream_max_per_user} open streams per user",
                           headers={"Retry-After": str(int(settings.stream_heartbeat_s))})
    try:
        queue = await hub.connect(reader_id)
    except Exception as exc:  # noqa: BLE001
        state.stream_leases.release(reader_id, lease)
        raise ProblemError(UNAVAILABLE, "the stream could not be opened",
                           headers={"Retry-After": "1"}) from exc
    # An open stream is reading: recorded like a page (once per period), and a reader the
    # fan-out stopped writing for is brought back (services/api/feed/activity.py).
    activity = getattr(getattr(state, "feed", None), "activity", None)
    if activity is not None:
        await activity.state(reader_id)
    resume = hub.resume(reader_id, last_event_id) if last_event_id else None
    version = feed_version or "live"
    metrics = state.feed_metrics
    metrics.streams.inc()
    writes = WriteDeadline(WRITE_MARGIN_S,
                           on_late=lambda outcome: metrics.stream_late_writes.labels(outcome).inc())

    async def events() -> AsyncIterator[ServerSentEvent]:
        beats = 0
        try:
            yield ServerSentEvent(comment="connected")
            if resume is not None and resume.resync:
                yield ServerSentEvent("{}", event="resync")
            for missed in resume.events if resume is not None else []:
                try:
                    allowed = (await state.stream_gate.allows(reader_id, missed.post_id,
                                                              missed.author_id)
                               and await state.stream_gate.still_allows(
                                   reader_id, missed.post_id, missed.author_id))
                    checked_at = writes.monotonic()  # in the step the check returned
                except FenceUnavailable:
                    yield ServerSentEvent("{}", event="resync")
                    break
                if allowed:
                    yield _new_item(missed, version, writes, checked_at)
            while True:
                try:
                    event = await asyncio.wait_for(queue.get(), settings.stream_heartbeat_s)
                except asyncio.TimeoutError:
                    if not hub.is_open(reader_id, queue):
                        return
                    beats += 1
                    try:
                        await state.stream_leases.refresh(reader_id, lease)
                        if activity is not None:
                            await activity.state(reader_id)
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
                    if not await state.stream_gate.still_allows(reader_id, event.post_id,
                                                                event.author_id):
                        metrics.skipped.labels("fenced").inc()
                        continue
                    checked_at = writes.monotonic()  # in the step the check returned
                except FenceUnavailable:
                    # Not judged, so not sent: the client refetches its first page, which
                    # answers once the log can be read again.
                    yield ServerSentEvent("{}", event="resync")
                    continue
                # Written (stamped) only while within the margin of this check, else
                # replaced by resync: see stream/write_deadline.py.
                yield _new_item(event, version, writes, checked_at)
        finally:
            hub.disconnect(reader_id, queue)
            metrics.streams.dec()
            state.stream_leases.release(reader_id, lease)

    return DeadlineResponse(events(), writes, headers={"Cache-Control": "no-store",
                                                       "X-Accel-Buffering": "no"})
