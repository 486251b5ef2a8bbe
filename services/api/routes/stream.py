"""``GET /v1/feed/stream``: server-sent ``new_item`` events for the caller's feed.

Events are ``event: new_item``, ``id: <boot>-<seq>``, ``data: {"post_id", "feed_version"}``
(``feed_version`` echoes the query parameter: the snapshot the client is showing, so it
knows the item belongs above that list; ``live`` when not given). A comment heartbeat
is sent every ``Settings.stream_heartbeat_s`` and refreshes the stream's lease. A client
reconnecting with ``Last-Event-ID`` gets the events it missed from this process's
buffer, re-checked, or an ``event: resync`` telling it to refetch its first page; an open
stream also gets ``resync`` when the hub's consumer lost events it cannot replay. More
than ``Settings.stream_max_per_user`` open streams gives a 429 problem.

The route authenticates, takes a lease under the cap and answers; the stream itself
(what is sent, and when) is ``stream.session``.
"""
from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Query, Request
from sse_starlette import EventSourceResponse

from services.api.http.auth import CurrentUser
from services.api.http.problems import UNAVAILABLE, ProblemError, ProblemKind, problem_responses
from services.api.snapshots.snapshot import MAX_VERSION_CHARS

from ..stream.hub import StreamHub
from ..stream.leases import StreamLeases
from ..stream.session import StreamUnavailable, open_session
from ..stream.write_deadline import DeadlineResponse

router = APIRouter(tags=["feed"])

TOO_MANY_STREAMS = ProblemKind("too-many-streams", 429, "Too many open streams")


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
    leases: StreamLeases = state.stream_leases
    reader_id = user.user_id
    try:
        lease = await leases.try_open(reader_id, settings.stream_max_per_user)
    except Exception as exc:  # noqa: BLE001 - store down: no stream, say so
        raise ProblemError(UNAVAILABLE, "the stream cap could not be checked",
                           headers={"Retry-After": "1"}) from exc
    if lease is None:
        raise ProblemError(TOO_MANY_STREAMS,
                           f"at most {settings.stream_max_per_user} open streams per user",
                           headers={"Retry-After": str(int(settings.stream_heartbeat_s))})
    # An open stream is reading: recorded like a page (once per period), and a reader the
    # fan-out stopped writing for is brought back (services/api/feed/activity.py).
    activity = getattr(getattr(state, "feed", None), "activity", None)
    try:
        session = await open_session(reader_id, lease, hub, state.stream_gate, leases,
                                     state.stream_metrics, settings.stream_heartbeat_s,
                                     feed_version=feed_version, last_event_id=last_event_id,
                                     on_read=activity.state if activity is not None else None)
    except StreamUnavailable as exc:
        raise ProblemError(UNAVAILABLE, "the stream could not be opened",
                           headers={"Retry-After": "1"}) from exc
    return DeadlineResponse(session.events(), session.writes,
                            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})
