"""Follow, block, mute and like: ``PUT`` starts, ``DELETE`` ends; all idempotent."""
from __future__ import annotations

import logging

from fastapi import APIRouter, Request, Response

from services.api.http.auth import CurrentUser
from services.api.http.deps import CommitWait, Pg
from services.api.http.models import FollowOut, PostIdPath, UserIdPath
from services.api.http.problems import (FORBIDDEN, NOT_FOUND, UNAVAILABLE, VALIDATION_FAILED,
                                        ProblemError, problem_responses)
from services.api.stores import posts as post_rows
from services.api.stores import social
from services.api.visibility.commit_wait import settle
from services.api.write.visibility import likeable_by
from services.shared.contracts.serving_changes import ServingChange

router = APIRouter(prefix="/v1", tags=["social"])
log = logging.getLogger(__name__)


async def _likes_changed(request: Request, user_id: int) -> None:
    """After a like or unlike committed: this process forgets the user's liked posts
    (copies/likes.py ``ReaderLikes``), and every other API process does when the
    ``likers`` notice, published here before the answer, reaches it. A notice that cannot
    be published is a 503: the retry (the write is idempotent) publishes it again."""
    state = request.app.state
    reader_likes = getattr(state, "reader_likes", None)
    if reader_likes is not None:
        reader_likes.drop((user_id,))
    notices = getattr(state, "api_notices", None)
    if notices is None:
        return
    try:
        await notices.changed(ServingChange(likers=(user_id,)))
    except Exception as exc:  # noqa: BLE001 - Kafka unreachable: the client retries
        log.warning("likers notice for user %d not published: %r", user_id, exc)
        raise ProblemError(UNAVAILABLE, "the like is stored; its notice could not be sent: "
                                        "retry", headers={"Retry-After": "1"}) from exc


def _refuse_self(user_id: int, other_id: int, verb: str) -> None:
    if user_id == other_id:
        raise ProblemError(VALIDATION_FAILED, f"you cannot {verb} yourself")


@router.put("/users/{author_id}/follow", response_model=FollowOut,
            summary="Follow an author (following_since is kept on repeat)",
            responses=problem_responses(401, 403, 404, 422))
async def follow(author_id: UserIdPath, user: CurrentUser, pool: Pg) -> FollowOut:
    _refuse_self(user.user_id, author_id, "follow")
    async with pool.connection() as conn, conn.transaction():
        await social.lock_pair(conn, user.user_id, author_id)
        if not await social.user_exists(conn, author_id):
            raise ProblemError(NOT_FOUND, "no such user")
        if await social.blocked_either_way(conn, user.user_id, author_id):
            raise ProblemError(FORBIDDEN, "a block stands between you and this user")
        since = await social.follow(conn, user.user_id, author_id)
    return FollowOut(follower_id=str(user.user_id), author_id=str(author_id),
                     following_since=since)


@router.delete("/users/{author_id}/follow", status_code=204, response_class=Response,
               summary="Unfollow an author", responses=problem_responses(401, 422))
async def unfollow(author_id: UserIdPath, user: CurrentUser, pool: Pg,
                   commit_wait: CommitWait) -> Response:
    async with pool.connection() as conn, conn.transaction():
        await social.unfollow(conn, user.user_id, author_id)
    await settle(commit_wait)
    return Response(status_code=204)


@router.put("/users/{user_id}/block", status_code=204, response_class=Response,
            summary="Block a user: hides content both ways and ends follows both ways",
            responses=problem_responses(401, 404, 422))
async def block(user_id: UserIdPath, user: CurrentUser, pool: Pg,
                commit_wait: CommitWait) -> Response:
    _refuse_self(user.user_id, user_id, "block")
    async with pool.connection() as conn, conn.transaction():
        await social.lock_pair(conn, user.user_id, user_id)
        if not await social.user_exists(conn, user_id):
            raise ProblemError(NOT_FOUND, "no such user")
        await social.block(conn, user.user_id, user_id)
    await settle(commit_wait)
    return Response(status_code=204)


@router.delete("/users/{user_id}/block", status_code=204, response_class=Response,
               summary="Unblock a user (follows are not restored)",
               responses=problem_responses(401, 422))
async def unblock(user_id: UserIdPath, user: CurrentUser, pool: Pg) -> Response:
    async with pool.connection() as conn, conn.transaction():
        await social.lock_pair(conn, user.user_id, user_id)
        await social.unblock(conn, user.user_id, user_id)
    return Response(status_code=204)


@router.put("/posts/{post_id}/like", status_code=204, response_class=Response,
            summary="Like a post", responses=problem_responses(401, 404, 422, 503))
async def like(post_id: PostIdPath, user: CurrentUser, pool: Pg, request: Request) -> Response:
    async with pool.connection() as conn, conn.transaction():
        found = await post_rows.fetch_for_viewer(conn, post_id, user.user_id)
        if found is None or not likeable_by(found[0], user.user_id, blocked=found[1]):
            raise ProblemError(NOT_FOUND, "no such post")
        await social.like(conn, post_id, user.user_id)
    await _likes_changed(request, user.user_id)
    return Response(status_code=204)


@router.delete("/posts/{post_id}/like", status_code=204, response_class=Response,
               summary="Remove a like", responses=problem_responses(401, 422, 503))
async def unlike(post_id: PostIdPath, user: CurrentUser, pool: Pg, request: Request) -> Response:
    async with pool.connection() as conn, conn.transaction():
        await social.unlike(conn, post_id, user.user_id)
    await _likes_changed(request, user.user_id)
    return Response(status_code=204)


@router.put("/users/{user_id}/mute", status_code=204, response_class=Response,
            summary="Mute a user: their posts leave your feed and stream; follows stay, "
                    "and they still see yours",
            responses=problem_responses(401, 404, 422))
async def mute(user_id: UserIdPath, user: CurrentUser, pool: Pg,
               commit_wait: CommitWait) -> Response:
    _refuse_self(user.user_id, user_id, "mute")
    async with pool.connection() as conn, conn.transaction():
        await social.lock_pair(conn, user.user_id, user_id)  # the hiding writes' lock order
        if not await social.user_exists(conn, user_id):
            raise ProblemError(NOT_FOUND, "no such user")
        await social.mute(conn, user.user_id, user_id)
    await settle(commit_wait)
    return Response(status_code=204)


@router.delete("/users/{user_id}/mute", status_code=204, response_class=Response,
               summary="Unmute a user: their posts come back to your feed",
               responses=problem_responses(401, 422))
async def unmute(user_id: UserIdPath, user: CurrentUser, pool: Pg) -> Response:
    async with pool.connection() as conn, conn.transaction():
        await social.lock_pair(conn, user.user_id, user_id)
        await social.unmute(conn, user.user_id, user_id)
    return Response(status_code=204)
