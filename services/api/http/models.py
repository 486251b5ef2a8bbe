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
    author_handle: str | None = Field(
        default=None, description="The author's handle; null when the author set none (or it "
                                  "could not be read). From the read path's copy, as on feed "
                                  "items: a new name shows within the pipeline's lag plus "
                                  "name_cache_s at most")
    author_display_name: str | None = Field(
        default=None, description="The author's display name; null when the author set none "
                                  "(or it could not be read)")


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
    author_handle: str | None = Field(default=None, description="The author's handle; null "
                                      "when none is set (or names_unavailable)")
    author_display_name: str | None = Field(default=None, description="The author's display "
                                            "name; null when none is set (or names_unavailable)")
    like_count: int | None = Field(
        default=None, description="How many users like the post, as feed items show it; null "
                                  "when it could not be read (likes_unavailable)")
    liked: bool | None = Field(
        default=None, description="Whether the caller likes the post (the source of truth: "
                                  "the caller's own like shows at once); null when it could "
                                  "not be read (likes_unavailable)")


class AuthorPostsPageOut(BaseModel):
    items: list[AuthorPostOut] = Field(description="The author's posts, newest first")
    next_cursor: str | None = Field(description="Pass back as cursor for the next page; null "
                                                "at the end. A page may hold fewer items than "
                                                "the limit (even none) and still have one")
    warnings: list[str] | None = Field(
        default=None,
        description="partial_page: ended before a post whose state could not be read; "
                    "names_unavailable: the author's names could not be read (null); "
                    "likes_unavailable: like counts or the caller's likes could not be "
                    "read (null)")


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


# -- profiles (PUT /v1/me/profile, GET /v1/users/{id}) ------------------------------------
# A handle: 3-30 ASCII letters, digits or underscores, stored as typed, unique whatever
# the case (Postgres' unique index on lower(handle)).
HANDLE_PATTERN = r"^[A-Za-z0-9_]{3,30}$"
MAX_DISPLAY_NAME_CHARS = 64
# What trimming removes from a display name's ends: the Unicode White_Space characters
# (written out: "\s" differs between the regex engines that read the pattern). Those
# below U+00A0 other than the space are control characters, allowed only at the ends.
_TRIMMED_SPACES = r" \xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
_TRIMMED_CONTROLS = r"\t\n\x0b\x0c\r\x85"
_CONTROLS = r"\x00-\x1f\x7f-\x9f"
# 1-64 characters without control characters once trimmed: first and last not a space,
# whatever spaces and line breaks around them. Written so that every engine reading the
# OpenAPI document (Rust's here, Python's, ECMAScript's) agrees with the API.
DISPLAY_NAME_PATTERN = (
    f"^[{_TRIMMED_SPACES}{_TRIMMED_CONTROLS}]*"
    f"[^{_CONTROLS}{_TRIMMED_SPACES}]"
    f"(?:[^{_CONTROLS}]{{0,{MAX_DISPLAY_NAME_CHARS - 2}}}[^{_CONTROLS}{_TRIMMED_SPACES}])?"
    f"[{_TRIMMED_SPACES}{_TRIMMED_CONTROLS}]*$")
_TRIM = ("".join(chr(c) for c in range(0x2000, 0x200B)) + " \xa0\u1680\u2028\u2029\u202f"
         "\u205f\u3000\t\n\x0b\x0c\r\x85")


def _trimmed(value: str) -> str:
    """The display name as stored: its ends' spaces and line breaks removed."""
    return _encodable(value).strip(_TRIM)


Handle = Annotated[str, StringConstraints(pattern=HANDLE_PATTERN)]
DisplayName = Annotated[str, StringConstraints(pattern=DISPLAY_NAME_PATTERN),
                        AfterValidator(_trimmed)]


class ProfileIn(BaseModel):
    """``PUT /v1/me/profile``: the caller's whole profile (a field left out or null is
    cleared)."""

    model_config = ConfigDict(extra="forbid")

    handle: Handle | None = Field(
        default=None, description="3-30 letters, digits or underscores, kept as typed; "
                                  "unique whatever the case (another user's: 409)")
    display_name: DisplayName | None = Field(
        default=None, description="1-64 characters once trimmed (spaces and line breaks "
                                  "at the ends are removed), no control characters")


class ProfileOut(BaseModel):
    user_id: str
    handle: str | None
    display_name: str | None


class UserOut(BaseModel):
    user_id: str
    handle: str | None = Field(description="null when the user set none")
    display_name: str | None = Field(description="null when the user set none")
    created_at: datetime
    followers_count: int = Field(description="The user's follower count (exact as of the "
                                             "serving copies, as /followers shows it)")
    following_count: int = Field(description="How many users the user follows (as "
                                             "/following shows it)")
    following: bool = Field(default=False, description="Whether the caller follows the user "
                                                       "(read from the source of truth: a "
                                                       "follow or unfollow shows at once); "
                                                       "false for the caller themself")
    muted: bool = Field(default=False, description="Whether the caller mutes the user (the "
                                                   "source of truth, as following); false "
                                                   "for the caller themself")
