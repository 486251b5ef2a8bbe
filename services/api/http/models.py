"""Request and response bodies. Requests reject unknown fields; every id is a string."""
from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from fastapi import Path
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints

MAX_ID = (1 << 63) - 1
# A post's text: 5,000 characters is generous for a feed item and bounds row size.
MAX_TEXT_CHARS = 5000
# Media are uploaded elsewhere (object storage); a post references at most a small album.
MAX_MEDIA_IDS = 10
MAX_REASON_CHARS = 500
# Postgres TEXT cannot hold NUL; refusing it here keeps it a 422, not a 500.
NO_NUL = r"^[^\x00]*$"


def _encodable(value: str) -> str:
    """Lone surrogates (legal in JSON escapes) cannot be stored as UTF-8: reject them."""
    value.encode("utf-8")
    return value


PostText = Annotated[str, StringConstraints(min_length=1, max_length=MAX_TEXT_CHARS,
                                            pattern=NO_NUL), AfterValidator(_encodable)]
MediaId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_-]{1,64}$")]
Reason = Annotated[str, StringConstraints(max_length=MAX_REASON_CHARS, pattern=NO_NUL),
                   AfterValidator(_encodable)]
IdempotencyKey = Annotated[str, StringConstraints(pattern=r"^[!-~]{1,255}$")]

PostIdPath = Annotated[int, Path(ge=1, le=MAX_ID, description="Snowflake post id")]
UserIdPath = Annotated[int, Path(ge=1, le=MAX_ID, description="user id")]


class PostCreate(BaseModel):
    """``POST /v1/posts``. The author is the token's subject, never a body field."""

    model_config = ConfigDict(extra="forbid")

    text: PostText
    media_ids: list[MediaId] = Field(default_factory=list, max_length=MAX_MEDIA_IDS)


class PostOut(BaseModel):
    post_id: str
    author_id: str
    text: str
    media_ids: list[str]
    created_at: datetime
    visibility: Literal["visible", "removed"]
    like_count: int | None = Field(
        default=0, description="How many users like the post, as the feed shows it (at most "
                               "the pipeline's lag plus like_count_cache_s old); null when "
                               "it could not be read")
    liked: bool | None = Field(
        default=False, description="Whether the caller likes the post (read from the source "
                                   "of truth: the caller's own like shows at once)")


class FollowOut(BaseModel):
    follower_id: str
    author_id: str
    following_since: datetime


class ModerationRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    action: Literal["remove", "restore"]
    reason: Reason = ""


class ModerationOut(BaseModel):
    post_id: str
    state: Literal["removed", "restored"]
    reason: str
    moderator_id: str
    updated_at: datetime


# -- an author's posts, followers and following (GET /v1/users/{id}/...) -------------------
class AuthorPostOut(BaseModel):
    post_id: str
    author_id: str
    text: str
    created_at: str


class AuthorPostsPageOut(BaseModel):
    items: list[AuthorPostOut] = Field(description="The author's posts, newest first")
    next_cursor: str | None = Field(description="Pass back as cursor for the next page; null "
                                                "at the end. A page may hold fewer items than "
                                                "the limit (even none) and still have one")
    warnings: list[str] | None = Field(
        default=None,
        description="partial_page: ended before a post whose state could not be read")


class FollowEntryOut(BaseModel):
    user_id: str
    following_since: str


class FollowersPageOut(BaseModel):
    items: list[FollowEntryOut] = Field(description="Followers, newest follow first")
    next_cursor: str | None
    followers_count: int = Field(description="The user's follower count (exact as of the "
                                             "serving copies)")
    warnings: list[str] | None = Field(
        default=None, description="list_truncated: the list is longer than one page may "
                                  "read (FEED_FOLLOW_LIST_MAX); its first rows by id are listed")


class FollowingPageOut(BaseModel):
    items: list[FollowEntryOut] = Field(description="Users followed, newest follow first")
    next_cursor: str | None
    following_count: int = Field(description="How many users the user follows (exact as of "
                                             "the serving copies)")
    warnings: list[str] | None = Field(
        default=None, description="list_truncated: the list is longer than one page may "
                                  "read (FEED_FOLLOW_LIST_MAX); its first rows by id are listed")


class AccountModerationRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    action: Literal["suspend", "unsuspend"]
    reason: Reason = ""


class AccountModerationOut(BaseModel):
    user_id: str
    state: Literal["suspended", "active"]
    reason: str
    moderator_id: str
