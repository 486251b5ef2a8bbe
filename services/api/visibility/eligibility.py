"""Whether a reader may see a post, now. Pure: every input is passed in.

The read path is the correctness path for deletes, removals, blocks and unfollows
(docs/read-path.md, "Eligibility against the truth"): materialized inbox rows are
cleaned up asynchronously, so every candidate is checked against the current copies on
every page, not only when the snapshot is built.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Mapping

from services.shared.domain.rules import VISIBLE

from .recent_changes import NOTHING, ReaderChanges


@dataclass(frozen=True, slots=True)
class PostState:
    """The mutable part of a post copy, as read for this request."""

    post_id: int
    author_id: int | None
    created_at_ms: int | None
    visibility: int | None
    deleted: bool | None


@dataclass(frozen=True)
class ReaderGraph:
    """The reader's follows (author -> following_since, Unix ms) and the authors hidden from
    their home feed and stream: blocked either way, or muted by the reader (the ``blocks``
    copy's partition, ``Blocks.hidden``)."""

    reader_id: int
    following_since_ms: Mapping[int, int]
    blocked: frozenset[int]


class Verdict(str, Enum):
    ELIGIBLE = "eligible"
    MISSING = "missing"          # no copy (not yet written, or read failed)
    DELETED = "deleted"
    REMOVED = "removed"          # visibility is not "visible" (moderation)
    BLOCKED = "blocked"          # the reader blocks the author, is blocked by them, or mutes them
    NOT_FOLLOWED = "not_followed"
    BEFORE_FOLLOW = "before_follow"  # older than following_since: no surprise backfill
    FENCED = "fenced"            # the copies still show it; the visibility log hides it
    ACCOUNT_HIDDEN = "account_hidden"  # its author is suspended or deleted (log or account copy)


def judge(post: PostState | None, graph: ReaderGraph, recent: ReaderChanges = NOTHING) -> Verdict:
    """The first reason ``post`` must not be shown to ``graph.reader_id``, or ELIGIBLE.

    ``graph`` and ``post`` are copies, which lag the truth by the pipeline; ``recent`` is
    what the visibility log (the truth, read after the request arrived) says of the
    reader's recent deletes, removals, blocks, mutes and unfollows: it can only hide."""
    if post is None or post.author_id is None or post.created_at_ms is None:
        return Verdict.MISSING
    if post.deleted:
        return Verdict.DELETED
    if post.visibility != VISIBLE:
        return Verdict.REMOVED
    if post.author_id in graph.blocked:
        return Verdict.BLOCKED
    since = graph.following_since_ms.get(post.author_id)
    if since is None:
        return Verdict.NOT_FOLLOWED
    if post.created_at_ms < since:
        return Verdict.BEFORE_FOLLOW
    if recent is not NOTHING and post.author_id in recent.hidden_authors:
        return Verdict.ACCOUNT_HIDDEN
    if recent is not NOTHING and recent.hides(post.post_id, post.author_id, post.created_at_ms):
        return Verdict.FENCED
    return Verdict.ELIGIBLE


def judge_authored(post: PostState | None, author_id: int, blocked: frozenset[int],
                   recent: ReaderChanges = NOTHING) -> Verdict:
    """``judge`` for a post listed on its author's timeline (``GET /v1/users/{id}/posts``):
    the same rules but follows, which do not matter there. A copy of another author's
    post (never written) is MISSING. ``blocked``: everyone blocked either way with the
    reader, from the copies (``Blocks.blocked``: not the reader's mutes, which hide an
    author from the home feed only); ``recent``: the visibility log, which can only hide
    (``hides_post``: blocks, not mutes)."""
    if post is None or post.author_id is None or post.created_at_ms is None:
        return Verdict.MISSING
    if post.author_id != author_id:
        return Verdict.MISSING
    if post.deleted:
        return Verdict.DELETED
    if post.visibility != VISIBLE:
        return Verdict.REMOVED
    if post.author_id in blocked:
        return Verdict.BLOCKED
    if recent is not NOTHING and post.author_id in recent.hidden_authors:
        return Verdict.ACCOUNT_HIDDEN
    if recent is not NOTHING and recent.hides_post(post.post_id, post.author_id):
        return Verdict.FENCED
    return Verdict.ELIGIBLE
