"""``PUT /v1/me/profile`` and ``GET /v1/users/{user_id}``: handles and display names.

The profile is Postgres' ``users`` row (its handle and display name), so a PUT answered
2xx is what the next ``GET /v1/users/{id}`` shows. Posts show their author's names from
the read path's copy instead (services/api/copies/names.py): within the pipeline's lag
plus ``FEED_NAME_CACHE_S`` at most.

A handle is unique whatever its case: one another user holds is a 409 ``handle-taken``.
The counts are the lists' (``UserLists.counts``), and a block either way between the
caller and the user answers 404 as the lists do. ``following`` and ``muted`` are the
caller's own relation to the user, read with the row from Postgres (the truth), so a
page can show its follow and mute toggles as they stand.
"""
from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request

from services.api.http.auth import CurrentUser
from services.api.http.deps import Pg
from services.api.http.models import ProfileIn, ProfileOut, UserIdPath, UserOut
from services.api.http.problems import (NOT_FOUND, UNAVAILABLE, ProblemError, ProblemKind,
                                        problem_responses)
from services.api.stores import profiles

from ..feed.user_lists import ListUnavailable, NotVisible, UserLists

router = APIRouter(tags=["users"])

HANDLE_TAKEN = ProblemKind("handle-taken", 409, "Handle is taken")
NO_SUCH_USER = "no such user"


@router.put("/v1/me/profile", response_model=ProfileOut,
            summary="Set the caller's handle and display name (idempotent)",
            responses=problem_responses(400, 401, 409, 422))
async def put_profile(body: ProfileIn, user: CurrentUser, pool: Pg) -> ProfileOut:
    """The caller's whole profile: a field left out or null is cleared."""
    try:
        async with pool.connection() as conn:
            await profiles.save(conn, user.user_id, body.handle, body.display_name)
    except profiles.HandleTaken as exc:
        raise ProblemError(HANDLE_TAKEN, f"the handle {body.handle!r} is taken") from exc
    return ProfileOut(user_id=str(user.user_id), handle=body.handle, display_name=body.display_name)


@router.get("/v1/users/{user_id}", response_model=UserOut, summary="A user's profile and counts",
            responses=problem_responses(401, 404, 422, 503))
async def get_user(request: Request, user_id: UserIdPath, user: CurrentUser, pool: Pg) -> UserOut:
    lists: UserLists | None = getattr(request.app.state, "user_lists", None)
    if lists is None:
        raise ProblemError(UNAVAILABLE, "the read store is not connected",
                           headers={"Retry-After": "1"})

    async def row() -> profiles.UserRow | None:
        async with pool.connection() as conn:
            return await profiles.fetch(conn, user_id, user.user_id)

    found, counts = await asyncio.gather(row(), lists.counts(user.user_id, user_id),
                                         return_exceptions=True)
    if isinstance(found, BaseException):
        raise found
    if found is None or isinstance(counts, NotVisible):
        raise ProblemError(NOT_FOUND, NO_SUCH_USER)
    if isinstance(counts, ListUnavailable):
        raise ProblemError(UNAVAILABLE, str(counts), headers={"Retry-After": "1"})
    if isinstance(counts, BaseException):
        raise counts
    followers, following = counts
    return UserOut(user_id=str(found.user_id), handle=found.handle, display_name=found.display_name,
                   created_at=found.created_at, followers_count=followers,
                   following_count=following, following=found.following,
                   muted=found.muted)
