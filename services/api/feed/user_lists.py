"""An author's posts and a user's followers and following: the use cases behind
``GET /v1/users/{id}/posts|followers|following`` (docs/api.md).

**Posts** are read from the author's ``author_timeline`` partitions (one per day of the
post id, clustered by rank key, not time: every row of a day is read and the ids sorted),
newest day first, ``DAYS_PER_READ`` days a read, until the page is full. Each candidate is
judged as a feed page judges it (``eligibility.judge_authored``: the post's copy, the
reader's blocks, and the visibility log read after the request arrived), so a delete, a
removal or a block answered 2xx is honoured by the next request, however far behind the
pipeline is. A page never reads more than ``MAX_DAYS_PER_PAGE`` days: past a long
silence it ends early, with a cursor below the days read (fewer items than asked for,
even none, with a ``next_cursor``: keep paging until it is null).

**Followers / following** are read from the ``followers`` / ``following`` copy: the
user's partition, at most ``list_max`` rows (one page), sorted newest first by
following_since (then user id). The counts: followers from ``follow_edges``' exact count
(its one owner's, docs/fanout.md "Counts"); following is the partition's length (a
``COUNT(*)`` when it is longer than the list reads). Users blocked either way with the
reader are left out of the items (not out of the counts).

A block either way between the reader and the user answers as an unknown user does
(``NotVisible``, a 404), on all three lists, and so does a deleted user (an account the
log or the account copy hides, and Postgres has no row of: ``user_gone``); so does
``GET /v1/posts/{id}`` for a post of a blocked author. A mute is not a block here: it
hides the muted author from the muter's home feed and stream only, so the muter still
opens their timeline and lists and sees them in other lists (``Blocks.blocked`` and
``ReaderChanges.blocked``, never the mutes). The pure parts (``posts_below``,
``follows_below``) are here too.
"""
from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field
from typing import Awaitable, Callable, Iterable, Sequence

from services.shared.domain import ids
from services.shared.stores.counted_edges import FOLLOW_EDGES, CountReads, count_of
from services.shared.stores.follows import ReadPathFollowLists
from services.shared.stores.timelines import ReadPathTimelines

from ..copies.bodies import PostCopies
from ..copies.post_view import PostBody
from ..copies.store import FeedPort, SourceRow, StatementRunner
from ..snapshots.cursor import CursorKeys
from ..snapshots.list_cursor import (FOLLOWERS, FOLLOWING, POSTS, ListCursor, decode_list_cursor,
                                     encode_list_cursor)
from ..visibility.eligibility import Verdict, judge_authored
from ..copies.accounts import AccountCopies, AccountsUnavailable
from ..visibility.fence import FenceUnavailable, VisibilityFence
from ..visibility.recent_changes import NOTHING, ReaderChanges

# Day partitions per multi-partition read; with ROWS_PER_DAY_READ rows each the answer
# (3,200 rows at most) stays within one driver page (fetch_size 5,000).
DAYS_PER_READ = 16
# Rows per day partition per read; a partition that returns this many is read on below
# its last row, up to MAX_READS_PER_DAY reads (an author's day holds at most 10,000 rows
# shown: above that, the rest of the day is left out).
ROWS_PER_DAY_READ = 200
MAX_READS_PER_DAY = 50
# Days one page reads at most (8 reads): past a long silence the page ends early.
MAX_DAYS_PER_PAGE = 128
# Share of a page expected to be lost to ineligible posts (the feed's PAGE_SLACK).
PAGE_SLACK = 0.5
# A list read returns up to ``list_max`` rows in one answer: more than the read path's
# point reads may take (store_timeout_s).
LIST_READ_TIMEOUT_S = 2.0
# Ids beyond any post id (the first page's upper bound).
_NO_BOUND = 1 << 63


class ListUnavailable(RuntimeError):
    """A correctness input (the reader's blocks, the visibility log, the rows or copies
    of the page) could not be read."""


class NotVisible(LookupError):
    """A block stands between the reader and the user: answered as an unknown user."""


@dataclass(frozen=True)
class AuthoredPost:
    post_id: int
    body: PostBody


@dataclass
class PostsPage:
    items: list[AuthoredPost]
    next_cursor: str | None
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class FollowEntry:
    user_id: int
    following_since_ms: int


@dataclass
class FollowPage:
    items: list[FollowEntry]
    next_cursor: str | None
    count: int
    warnings: list[str] = field(default_factory=list)


def posts_below(rows: Iterable[SourceRow], top: int) -> list[int]:
    """The post ids of timeline rows below ``top``, newest first, each once (a post
    whose rank key moved may have two rows for a while). Pure."""
    return sorted({row[1] for row in rows if row[1] < top}, reverse=True)


def follows_below(rows: Iterable[tuple[int, int | None]],
                  boundary: tuple[int, int] | None) -> list[FollowEntry]:
    """``(user_id, following_since ms)`` rows newest first (following_since, then user
    id, both descending), strictly below ``boundary``. Pure."""
    entries = sorted(((since or 0, user) for user, since in rows), reverse=True)
    if boundary is not None:
        entries = [e for e in entries if e < boundary]
    return [FollowEntry(user, since) for since, user in entries]


def day_floor(bucket: int) -> int:
    """The smallest post id of a day bucket."""
    return ids.lowest_id_at(ids.EPOCH_MS + bucket * ids.MS_PER_DAY)


class UserLists:
    """The three lists. ``store``: the read path's store (blocks through the serving
    cache's graph; the statements below through ``run``, never cached)."""

    def __init__(self, store: FeedPort, runner: StatementRunner, copies: PostCopies,
                 fence: VisibilityFence | None, keys: CursorKeys, timelines: ReadPathTimelines,
                 follows: ReadPathFollowLists, counts: CountReads, list_max: int,
                 clock_ms: Callable[[], int], accounts: AccountCopies | None = None,
                 user_gone: Callable[[int], Awaitable[bool]] | None = None) -> None:
        assert counts.table is FOLLOW_EDGES
        self._accounts = accounts
        self._user_gone = user_gone
        self._store = store
        self._run = runner.run
        self._copies = copies
        self._fence = fence
        self._keys = keys
        self._timelines = timelines
        self._follows = follows
        self._counts = counts
        self._list_max = list_max
        self._clock_ms = clock_ms

    # -- shared ---------------------------------------------------------------------------
    def _cursor(self, token: str | None, kind: str, reader_id: int, subject_id: int) -> ListCursor | None:
        if token is None:
            return None
        return decode_list_cursor(token, self._keys, kind=kind, reader_id=reader_id,
                                  subject_id=subject_id)

    async def _fold(self, ticket: int | None, reader_id: int) -> ReaderChanges | None:
        """What the visibility log says for the reader, as of a read that went out after
        the request arrived; None in window mode (ask ``_window`` for each window)."""
        fence = self._fence
        if fence is None or ticket is None:
            return NOTHING
        try:
            return (await fence.wait(ticket)).for_reader(reader_id)
        except FenceUnavailable as exc:
            raise ListUnavailable(str(exc)) from exc

    async def _window(self, reader_id: int, items: Sequence[tuple[int, int]]) -> ReaderChanges:
        """Window mode: what Postgres says now of ``items`` (``(post_id, author_id)``;
        post 0 to ask about a user alone)."""
        assert self._fence is not None
        try:
            return await self._fence.window(reader_id, items)
        except FenceUnavailable as exc:
            raise ListUnavailable(str(exc)) from exc

    async def _blocked(self, reader_id: int) -> frozenset[int]:
        """Everyone blocked either way with the reader (not the reader's mutes)."""
        try:
            return (await self._store.blocks(reader_id)).blocked
        except Exception as exc:  # noqa: BLE001 - a timeout or an unreachable node
            raise ListUnavailable("the reader's blocks could not be read") from exc

    async def _guard(self, reader_id: int, user_id: int) -> tuple[ReaderChanges | None, frozenset[int]]:
        """The log's changes for the reader (None: window mode) and the reader's
        blocks; raises ``NotVisible`` when a block stands between the reader and
        ``user_id``. The log's read goes out first and travels with the blocks' read."""
        ticket = self._fence.arrive() if self._fence is not None else None
        blocked = await self._blocked(reader_id)
        fold = await self._fold(ticket, reader_id)
        recent = fold if fold is not None else await self._window(reader_id, [(0, user_id)])
        hidden_account = user_id in recent.hidden_authors
        if self._accounts is not None:
            # A suspended or deleted author: the account copy hides every post of theirs.
            try:
                hidden = await self._accounts.hidden_among([user_id])
            except AccountsUnavailable as exc:
                raise ListUnavailable(str(exc)) from exc
            hidden_account = hidden_account or bool(hidden)
            if hidden and fold is not None:
                fold = fold.hiding_authors(hidden)   # (window mode asks Postgres itself)
        if user_id != reader_id and (user_id in blocked or user_id in recent.blocked):
            raise NotVisible(user_id)
        if hidden_account and self._user_gone is not None:
            # Suspended or deleted? Only the truth tells: a deleted user is no user, in
            # every process, from the request after the deletion's answer.
            try:
                gone = await self._user_gone(user_id)
            except Exception as exc:  # noqa: BLE001 - Postgres unreachable or timed out
                raise ListUnavailable("whether the user exists could not be read") from exc
            if gone:
                raise NotVisible(user_id)
        return fold, blocked

    # -- a user's counts (GET /v1/users/{id}) -------------------------------------------
    async def counts(self, reader_id: int, user_id: int) -> tuple[int, int]:
        """(followers, following) of ``user_id``, as the lists count them; raises
        ``NotVisible`` (a block either way) and ``ListUnavailable``."""
        results = await asyncio.gather(
            self._guard(reader_id, user_id),
            self._run(self._counts.count, (user_id,), True),
            self._run(self._follows.following_count, (user_id,), True, LIST_READ_TIMEOUT_S),
            return_exceptions=True)
        if isinstance(results[0], BaseException):
            raise results[0]   # the guard's answer first: a block is a 404 whatever else failed
        for result in results[1:]:
            if isinstance(result, BaseException):
                raise ListUnavailable("the user's counts could not be read") from result
        return count_of(results[1]), count_of(results[2])

    # -- an author's posts --------------------------------------------------------------
    async def posts(self, reader_id: int, author_id: int, limit: int, token: str | None) -> PostsPage:
        """A page of ``author_id``'s posts, newest first; raises ``CursorRejected``,
        ``NotVisible``, ``ListUnavailable``."""
        cursor = self._cursor(token, POSTS, reader_id, author_id)
        fold, blocked = await self._guard(reader_id, author_id)
        top = cursor.major if cursor is not None else _NO_BOUND
        # A first page starts a day ahead: ids may run ahead of this clock (skew).
        day = (ids.day_bucket(top - 1) if cursor is not None
               else ids.day_bucket(ids.lowest_id_at(self._clock_ms() + ids.MS_PER_DAY)))
        items: list[AuthoredPost] = []
        pending: list[int] = []
        judged: int | None = None     # the lowest post id judged
        floor = top                   # every post id in [floor, top) has been read
        days = 0
        stalled = False
        while len(items) < limit:
            if not pending:
                if day < 0 or days >= MAX_DAYS_PER_PAGE:
                    break
                buckets = [d for d in range(day, day - DAYS_PER_READ, -1) if d >= 0]
                pending = posts_below(await self._days(author_id, buckets), top)
                day, days, floor = buckets[-1] - 1, days + len(buckets), day_floor(buckets[-1])
                continue
            wanted = limit - len(items)
            window = pending[:wanted + int(wanted * PAGE_SLACK) + 1]
            fetched = await self._copies.fetch(window)
            usable = []
            for post_id in window:
                if post_id in fetched.failed:
                    break
                usable.append(post_id)
            changes = fold
            if changes is None:
                changes = await self._window(reader_id, [(p, author_id) for p in usable] or [(0, author_id)])
            used = 0
            for post_id in usable:
                if len(items) >= limit:
                    break
                used += 1
                judged = post_id
                view = fetched.views.get(post_id)
                verdict = judge_authored(view.state if view else None, author_id, blocked, changes)
                if verdict is Verdict.ELIGIBLE and view is not None and view.body is not None:
                    items.append(AuthoredPost(post_id, view.body))
            pending = pending[used:]
            if len(usable) < len(window) and len(items) < limit:
                stalled = True
                break
        warnings: list[str] = []
        if stalled:
            if not items:
                raise ListUnavailable("post copies could not be read")
            warnings.append("partial_page")
            below: int | None = judged
        elif pending or (len(items) >= limit and day >= 0):
            below = judged
        elif day >= 0:
            below = floor    # the day budget ran out: go on below the days read
        else:
            below = None     # every day down to the first was read
        next_cursor = None
        if below is not None:
            next_cursor = encode_list_cursor(ListCursor(POSTS, reader_id, author_id, below), self._keys)
        return PostsPage(items, next_cursor, warnings)

    async def _days(self, author_id: int, buckets: list[int]) -> list[SourceRow]:
        """Every row of the author's partitions of ``buckets``: one multi-partition read,
        and a partition that filled its share read on below its last row."""
        try:
            rows: list[SourceRow] = await self._run(
                self._timelines.top_in, ([author_id], buckets, ROWS_PER_DAY_READ), True,
                LIST_READ_TIMEOUT_S)
            full = [b for b, n in Counter(ids.day_bucket(r[1]) for r in rows).items()
                    if n >= ROWS_PER_DAY_READ]
            for bucket in full:
                last = min(r[:2] for r in rows if ids.day_bucket(r[1]) == bucket)
                for _ in range(MAX_READS_PER_DAY - 1):
                    more: list[SourceRow] = await self._run(
                        self._timelines.after_in,
                        ([author_id], [bucket], last[0], last[1], ROWS_PER_DAY_READ), True,
                        LIST_READ_TIMEOUT_S)
                    rows += more
                    if len(more) < ROWS_PER_DAY_READ:
                        break
                    last = min(r[:2] for r in more)
        except Exception as exc:  # noqa: BLE001 - a timeout or an unreachable node
            raise ListUnavailable("the author's timeline could not be read") from exc
        return rows

    # -- followers and following --------------------------------------------------------
    async def followers(self, reader_id: int, user_id: int, limit: int, token: str | None) -> FollowPage:
        return await self._follow_list(FOLLOWERS, reader_id, user_id, limit, token)

    async def following(self, reader_id: int, user_id: int, limit: int, token: str | None) -> FollowPage:
        return await self._follow_list(FOLLOWING, reader_id, user_id, limit, token)

    async def _follow_list(self, kind: str, reader_id: int, user_id: int, limit: int,
                           token: str | None) -> FollowPage:
        cursor = self._cursor(token, kind, reader_id, user_id)
        statement = self._follows.followers_of if kind == FOLLOWERS else self._follows.following_of
        reads: list[Awaitable[object]] = [
            self._guard(reader_id, user_id),
            self._run(statement, (user_id, self._list_max), True, LIST_READ_TIMEOUT_S)]
        if kind == FOLLOWERS:
            reads.append(self._run(self._counts.count, (user_id,), True))
        results = await asyncio.gather(*reads, return_exceptions=True)
        if isinstance(results[0], BaseException):
            raise results[0]   # the guard's answer first: a block is a 404 whatever else failed
        guarded: tuple[ReaderChanges | None, frozenset[int]] = results[0]  # type: ignore[assignment]
        fold, blocked = guarded
        for result in results[1:]:
            if isinstance(result, BaseException):
                raise ListUnavailable(f"the {kind} list could not be read") from result
        rows: list[tuple[int, int | None]] = results[1]  # type: ignore[assignment]
        truncated = len(rows) >= self._list_max
        if kind == FOLLOWERS:
            count = count_of(results[2])  # type: ignore[arg-type]
        elif truncated:
            try:
                count = count_of(await self._run(self._follows.following_count, (user_id,), True,
                                                 LIST_READ_TIMEOUT_S))
            except Exception as exc:  # noqa: BLE001 - a timeout or an unreachable node
                raise ListUnavailable("the following count could not be read") from exc
        else:
            count = len(rows)
        entries = follows_below(rows, cursor.boundary if cursor is not None else None)
        items: list[FollowEntry] = []
        at = 0
        while len(items) < limit and at < len(entries):
            wanted = limit - len(items)
            window = entries[at:at + wanted + int(wanted * PAGE_SLACK) + 1]
            changes = fold
            if changes is None:
                changes = await self._window(reader_id, [(0, e.user_id) for e in window])
            for entry in window:
                if len(items) >= limit:
                    break
                at += 1
                if entry.user_id not in blocked and entry.user_id not in changes.blocked:
                    items.append(entry)
        next_cursor = None
        if items and at < len(entries):
            last = items[-1]
            next_cursor = encode_list_cursor(
                ListCursor(kind, reader_id, user_id, last.following_since_ms, last.user_id), self._keys)
        return FollowPage(items, next_cursor, count, ["list_truncated"] if truncated else [])
