"""``GET /v1/users/{user_id}/posts``, ``/followers`` and ``/following``: a user's lists.

Thin: the decisions are in ``services/api/feed/user_lists.py``. An unknown user and a
user with a block between them and the caller (either way) get the same 404 (docs/api.md,
"Blocks"); a user the caller mutes does not (a mute hides them from the home feed
only: docs/api.md, "Mutes"). A cursor of another list, user or reader, or a tampered
one, is a 400 ``invalid-cursor`` like the feed's.
"""
from __future__ import annotations

import asyncio
from datetime import datetime, timezone
from typing import Annotated

from fastapi import APIRouter, Query, Request

from services.api.copies.likes import (LikeCounts, LikesRead, PageLikes, ReaderLikes,
                                       pool_liked_reader)
from services.api.copies.names import NO_NAME, Name, Names
from services.api.http.auth import CurrentUser
from services.api.http.deps import Pg
from services.api.http.models import (AuthorPostOut, AuthorPostsPageOut, FollowEntryOut,
                                      FollowersPageOut, FollowingPageOut, UserIdPath)
from services.api.http.problems import NOT_FOUND, UNAVAILABLE, ProblemError, problem_responses
from services.api.snapshots.cursor import MAX_CURSOR_CHARS, CursorRejected
from services.api.stores import social
from services.api.write.users import KnownUsers
from services.shared.domain.rules import iso_utc

from ..feed.user_lists import FollowPage, ListUnavailable, NotVisible, UserLists
from .feed import INVALID_CURSOR

router = APIRouter(prefix="/v1/users", tags=["users"])

DEFAULT_LIMIT = 20
MAX_LIMIT = 100
NO_SUCH_USER = "no such user"

Limit = Annotated[int, Query(ge=1, le=MAX_LIMIT, description="Items per page")]
CursorParam = Annotated[str | None, Query(min_length=1, max_length=MAX_CURSOR_CHARS,
                                          description="next_cursor of the previous page")]


def _lists(request: Request) -> UserLists:
    lists: UserLists | None = getattr(request.app.state, "user_lists", None)
    if lists is None:
        raise ProblemError(UNAVAILABLE, "the read store is not connected",
                           headers={"Retry-After": "1"})
    return lists


async def _existing(request: Request, pool: Pg, user_id: int) -> None:
    """404 unless the user exists. A known one is remembered; if their account is hidden
    since, the lists' guard asks Postgres again (``UserLists._guard``): a deleted user
    answers 404 in every process."""
    known: KnownUsers = request.app.state.known_users
    if known.touch(user_id):
        return
    async with pool.connection() as conn:
        if not await social.user_exists(conn, user_id):
            raise ProblemError(NOT_FOUND, NO_SUCH_USER)
    known.remember(user_id)


def _iso_ms(unix_ms: int) -> str:
    return iso_utc(datetime.fromtimestamp(unix_ms / 1000, tz=timezone.utc))


def _problems(exc: Exception) -> ProblemError:
    if isinstance(exc, CursorRejected):
        return ProblemError(INVALID_CURSOR, str(exc))
    if isinstance(exc, NotVisible):
        return ProblemError(NOT_FOUND, NO_SUCH_USER)
    return ProblemError(UNAVAILABLE, str(exc), headers={"Retry-After": "1"})


def _entries(page: FollowPage) -> list[FollowEntryOut]:
    return [FollowEntryOut(user_id=str(e.user_id), following_since=_iso_ms(e.following_since_ms))
            for e in page.items]


@router.get("/{user_id}/posts", response_model=AuthorPostsPageOut, response_model_exclude_unset=True,
            summary="An author's posts, newest first",
            responses=problem_responses(400, 401, 404, 422, 503))
async def author_posts(request: Request, user_id: UserIdPath, user: CurrentUser, pool: Pg,
                       limit: Limit = DEFAULT_LIMIT, cursor: CursorParam = None) -> AuthorPostsPageOut:
    lists = _lists(request)
    await _existing(request, pool, user_id)
    # The author's names (copies/names.py) are read with the page, not after it.
    names: Names | None = getattr(request.app.state, "names", None)
    named = asyncio.ensure_future(names.maybe([user_id]) if names is not None else _no_names())
    try:
        page = await lists.posts(user.user_id, user_id, limit, cursor)
    except (CursorRejected, NotVisible, ListUnavailable) as exc:
        named.cancel()
        raise _problems(exc) from exc
    likes = await _likes(request, pool, user.user_id, [i.post_id for i in page.items])
    found = await named
    name = found.get(user_id, NO_NAME) if found is not None else NO_NAME
    out = AuthorPostsPageOut(
        items=[AuthorPostOut(post_id=str(i.post_id), author_id=str(i.body.author_id),
                             text=i.body.text, created_at=_iso_ms(i.body.created_at_ms),
                             author_handle=name.handle, author_display_name=name.display_name,
                             like_count=likes.count_of(i.post_id), liked=likes.liked_of(i.post_id))
               for i in page.items],
        next_cursor=page.next_cursor)
    warnings = page.warnings + (["names_unavailable"] if found is None and page.items else [])
    warnings += ["likes_unavailable"] if likes.failed else []
    if warnings:
        out.warnings = warnings
    return out


async def _no_names() -> dict[int, Name]:
    return {}


async def _likes(request: Request, pool: Pg, reader_id: int, post_ids: list[int]) -> LikesRead:
    """The page's like counts and the reader's likes, as feed pages read them
    (copies/likes.py: one read of each kind for the page; never raises)."""
    counts: LikeCounts | None = getattr(request.app.state, "like_counts", None)
    if counts is None:
        return LikesRead(failed=bool(post_ids))
    reader_likes: ReaderLikes | None = getattr(request.app.state, "reader_likes", None)
    liked = reader_likes.liked_among if reader_likes is not None else pool_liked_reader(pool)
    return await PageLikes(counts, liked).read(reader_id, post_ids)


@router.get("/{user_id}/followers", response_model=FollowersPageOut,
            response_model_exclude_unset=True, summary="Who follows a user, newest follow first",
            responses=problem_responses(400, 401, 404, 422, 503))
async def followers(request: Request, user_id: UserIdPath, user: CurrentUser, pool: Pg,
                    limit: Limit = DEFAULT_LIMIT, cursor: CursorParam = None) -> FollowersPageOut:
    lists = _lists(request)
    await _existing(request, pool, user_id)
    try:
        page = await lists.followers(user.user_id, user_id, limit, cursor)
    except (CursorRejected, NotVisible, ListUnavailable) as exc:
        raise _problems(exc) from exc
    out = FollowersPageOut(items=_entries(page), next_cursor=page.next_cursor,
                           followers_count=page.count)
    if page.warnings:
        out.warnings = page.warnings
    return out


@router.get("/{user_id}/following", response_model=FollowingPageOut,
            response_model_exclude_unset=True, summary="Whom a user follows, newest follow first",
            responses=problem_responses(400, 401, 404, 422, 503))
async def following(request: Request, user_id: UserIdPath, user: CurrentUser, pool: Pg,
                    limit: Limit = DEFAULT_LIMIT, cursor: CursorParam = None) -> FollowingPageOut:
    lists = _lists(request)
    await _existing(request, pool, user_id)
    try:
        page = await lists.following(user.user_id, user_id, limit, cursor)
    except (CursorRejected, NotVisible, ListUnavailable) as exc:
        raise _problems(exc) from exc
    out = FollowingPageOut(items=_entries(page), next_cursor=page.next_cursor,
                           following_count=page.count)
    if page.warnings:
        out.warnings = page.warnings
    return out
