"""``POST /v1/posts`` (Idempotency-Key), ``GET`` and ``DELETE /v1/posts/{post_id}``.

``GET`` reads the post from Postgres, with whether the caller likes it (Postgres too: the
caller's own like shows at once), its like count as pages show it (the process's
kept counts over Cassandra's, services/api/copies/likes.py; null when it cannot be read)
and its author's names as pages show them (services/api/copies/names.py).
"""
from __future__ import annotations

import asyncio
import logging
from typing import Annotated, Any

from fastapi import APIRouter, Header, Request, Response
from fastapi.responses import JSONResponse

from services.api.copies.likes import LikeCounts, liked_among
from services.api.copies.names import NO_NAME, Name, Names
from services.api.http.auth import CurrentUser
from services.api.http.deps import CommitWait, Ids, Metrics, Pg
from services.api.http.models import IdempotencyKey, PostCreate, PostIdPath, PostOut
from services.api.http.problems import (FORBIDDEN, IDEMPOTENCY_IN_FLIGHT, IDEMPOTENCY_KEY_REUSED,
                                        NOT_FOUND, UNAVAILABLE, ProblemError, problem_responses)
from services.api.stores import idempotency as keys
from services.api.stores import posts as post_rows
from services.api.stores import profiles
from services.api.visibility.commit_wait import settle
from services.api.write import idempotency
from services.api.write.idempotency import Outcome, StoredKey
from services.api.write.idgen import ClockMovedBackwards, IdGenerationError, LeaseLost
from services.api.write.visibility import StoredPost, visible_to
from services.shared.domain import ids as snowflake
from services.shared.domain.rules import VISIBLE

router = APIRouter(prefix="/v1/posts", tags=["posts"])

log = logging.getLogger(__name__)


def post_json(post: StoredPost, like_count: int | None = 0, liked: bool | None = False,
              name: Name = NO_NAME) -> dict[str, Any]:
    """The API's view of a post; ids as strings (a new post: no likes; the creation's
    answer and its replays carry the author's names as they were at creation)."""
    return PostOut(post_id=str(post.post_id), author_id=str(post.author_id), text=post.text,
                   media_ids=list(post.media_ids), created_at=post.created_at,
                   visibility="visible" if post.visibility == VISIBLE else "removed",
                   like_count=like_count, liked=liked, author_handle=name.handle,
                   author_display_name=name.display_name).model_dump(mode="json")


async def _name(request: Request, author_id: int) -> Name:
    """The author's names from the read path's copy (copies/names.py), as pages show them;
    none without the store or when the read fails."""
    names: Names | None = getattr(request.app.state, "names", None)
    if names is None:
        return NO_NAME
    found = await names.maybe([author_id])
    return found.get(author_id, NO_NAME) if found is not None else NO_NAME


async def _like_count(request: Request, post_id: int) -> int | None:
    """The post's like count as pages show it; None without the store or on a failed read."""
    counts: LikeCounts | None = getattr(request.app.state, "like_counts", None)
    if counts is None:
        return None
    try:
        return (await counts.counts([post_id])).get(post_id, 0)
    except Exception:  # noqa: BLE001 - a count is not worth failing the read for
        log.warning("like count of post %d could not be read", post_id, exc_info=True)
        return None


def _replay(stored: StoredKey) -> JSONResponse:
    body = stored.response_body
    headers = {"Idempotent-Replayed": "true"}
    if isinstance(body, dict) and "post_id" in body:
        headers["Location"] = f"/v1/posts/{body['post_id']}"
    return JSONResponse(body, status_code=stored.status_code or 200, headers=headers)


def _new_post_id(ids: Ids, metrics: Metrics) -> int:
    try:
        post_id = ids.next_id()
    except ClockMovedBackwards as exc:
        metrics.id_errors.labels("clock").inc()
        raise ProblemError(UNAVAILABLE, "clock moved backwards; retry shortly",
                           headers={"Retry-After": "1"}) from exc
    except LeaseLost as exc:
        metrics.id_errors.labels("lease").inc()
        raise ProblemError(UNAVAILABLE, "this instance cannot issue ids",
                           headers={"Retry-After": "1"}) from exc
    except IdGenerationError as exc:
        metrics.id_errors.labels("other").inc()
        raise ProblemError(UNAVAILABLE, str(exc), headers={"Retry-After": "1"}) from exc
    metrics.ids_issued.inc()
    return post_id


@router.post("", status_code=201, response_model=PostOut,
             summary="Create a post (exactly once per Idempotency-Key within 24 h)",
             responses=problem_responses(400, 401, 409, 413, 422, 503))
async def create_post(body: PostCreate, user: CurrentUser, pool: Pg, ids: Ids,
                      metrics: Metrics,
                      idempotency_key: Annotated[IdempotencyKey, Header()]) -> Any:
    request_hash = idempotency.request_fingerprint(body.model_dump(mode="json"))
    claim = await keys.claim(pool, user.user_id, idempotency_key, request_hash)
    if isinstance(claim, StoredKey):
        outcome = idempotency.decide(claim, request_hash)
        if outcome is Outcome.DIFFERENT_BODY:
            raise ProblemError(IDEMPOTENCY_KEY_REUSED,
                               "this Idempotency-Key was used with a different body")
        if outcome is Outcome.IN_FLIGHT:
            raise ProblemError(IDEMPOTENCY_IN_FLIGHT, "retry when the first request ends",
                               headers={"Retry-After": "1"})
        metrics.idempotent_replays.inc()
        return _replay(claim)
    try:
        post_id = _new_post_id(ids, metrics)
        post = StoredPost(post_id=post_id, author_id=user.user_id, text=body.text,
                          media_ids=body.media_ids,
                          created_at=snowflake.parse(post_id).created_at,
                          visibility=VISIBLE, deleted_at=None)
        async with pool.connection() as conn, conn.transaction():
            # The author's names as Postgres holds them now: stored with the answer, so a
            # replay shows the names the post was created under.
            name = Name(*await profiles.names_of(conn, user.user_id))
            stored = await keys.complete(conn, user.user_id, idempotency_key, claim, 201,
                                         post_json(post, name=name))
            if stored is None:
                raise ProblemError(IDEMPOTENCY_IN_FLIGHT,
                                   "this Idempotency-Key was taken over by another request")
            await post_rows.insert(conn, post)
    except BaseException:
        await keys.release(pool, user.user_id, idempotency_key, claim)
        raise
    return JSONResponse(stored, status_code=201, headers={"Location": f"/v1/posts/{post_id}"})


@router.get("/{post_id}", response_model=PostOut, summary="Read a post",
            responses=problem_responses(401, 404, 422))
async def get_post(post_id: PostIdPath, user: CurrentUser, pool: Pg, request: Request) -> Any:
    async with pool.connection() as conn:
        found = await post_rows.fetch_for_viewer(conn, post_id, user.user_id)
        if found is None or not visible_to(found[0], user.user_id, blocked=found[1]):
            raise ProblemError(NOT_FOUND, "no such post")
        liked = post_id in await liked_among(conn, user.user_id, [post_id])
    count, name = await asyncio.gather(_like_count(request, post_id),
                                       _name(request, found[0].author_id))
    return post_json(found[0], count, liked, name)


@router.delete("/{post_id}", status_code=204, response_class=Response,
               summary="Delete one's own post (soft delete; idempotent)",
               responses=problem_responses(401, 403, 404, 422))
async def delete_post(post_id: PostIdPath, user: CurrentUser, pool: Pg,
                      commit_wait: CommitWait) -> Response:
    async with pool.connection() as conn, conn.transaction():
        found = await post_rows.lock_author(conn, post_id)
        if found is None:
            raise ProblemError(NOT_FOUND, "no such post")
        author_id, already_deleted = found
        if author_id != user.user_id:
            raise ProblemError(FORBIDDEN, "only the author may delete a post")
        if not already_deleted:
            await post_rows.soft_delete(conn, post_id)
    await settle(commit_wait)   # a repeat too: the first one's commit may be that recent
    return Response(status_code=204)
