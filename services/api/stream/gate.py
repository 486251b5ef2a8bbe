"""The stream's authorization and eligibility check: current Cassandra copies, and the
visibility log read after the check began (``visibility.fence``), as for a feed page.

The same rules as a feed page (``visibility.eligibility.judge``) for one (reader, post): the
post copy must be visible and not deleted, the reader must still follow the author
(since before the post), neither may block the other and the reader must not mute the
author (the stream is the home feed's: a mute hides there). One author event is checked
for every connected follower, so the post copy is read once per event
(``POST_STATE_TTL_S``) and the per-reader reads are two single-row lookups; the log's
read is shared by every check in flight (single-flight).

An event waits in an open stream's queue between that check and its send, so the route
asks ``still_allows`` right before it writes the event: one more (shared) read of the
log, which is what can have changed in between that the guarantee covers. That read
must have gone out less than ``fresh_s`` before the write (``visibility/commit_wait.py``):
a hiding write it missed is answered ``visibility_commit_wait_s`` after its commit,
hence after the event; an older answer is read again, up to ``FRESH_READS`` times, and
then the event is not sent (``FenceUnavailable``: the client is told to resync).
"""
from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from typing import Callable

from services.shared.domain import ids
from services.shared.stores.posts import PostStateRow

from ..copies.accounts import AccountCopies
from ..copies.store import FeedPort
from ..visibility.eligibility import PostState, ReaderGraph, Verdict, judge
from ..visibility.fence import WINDOW, FenceUnavailable, LogView, VisibilityFence
from ..visibility.recent_changes import NOTHING, ReaderChanges

# One author event fans out to its connected followers within a few milliseconds; a
# half-second memo of the post's state covers that burst without serving a stale
# deletion to a later event (a later event for the same post re-reads it).
POST_STATE_TTL_S = 0.5
POST_STATE_MEMO = 1024
# Reads of the log tried for one event when each answer comes back older than the bound.
FRESH_READS = 4


class EligibilityGate:
    def __init__(self, store: FeedPort, fence: VisibilityFence | None = None,
                 monotonic: Callable[[], float] = time.monotonic,
                 fresh_s: float | None = None, accounts: AccountCopies | None = None) -> None:
        self._store = store
        self._accounts = accounts   # the account copy: suspended or deleted authors
        self._fence = fence
        self._fresh_s = fresh_s
        self._monotonic = monotonic
        self._posts: OrderedDict[int, tuple[float, asyncio.Future[PostState | None]]] = OrderedDict()

    async def _post_state(self, post_id: int) -> PostState | None:
        now = self._monotonic()
        memo = self._posts.get(post_id)
        if memo is not None and now - memo[0] < POST_STATE_TTL_S:
            return await asyncio.shield(memo[1])
        future: asyncio.Future[PostState | None] = asyncio.ensure_future(self._read_post(post_id))
        self._posts[post_id] = (now, future)
        while len(self._posts) > POST_STATE_MEMO:
            self._posts.popitem(last=False)
        return await asyncio.shield(future)

    async def _read_post(self, post_id: int) -> PostState | None:
        rows = await self._store.posts([post_id], with_text=False)
        if not rows:
            return None
        row = PostStateRow._make(rows[0])  # one row an event: named, not unpacked
        return PostState(row.post_id, row.author_id, row.created_at_ms, row.visibility, row.deleted)

    async def allows(self, reader_id: int, post_id: int, author_id: int) -> bool:
        """Whether ``reader_id`` may be told about ``post_id`` now. Raises
        ``FenceUnavailable`` when the visibility log cannot be read."""
        post, since, hidden, changes, account_hidden = await asyncio.gather(
            self._post_state(post_id), self._store.following_since(reader_id, author_id),
            self._store.hidden_between(reader_id, author_id), self._changes(),
            self._hidden_account(author_id))
        if post is None or post.author_id != author_id or account_hidden:
            return False
        graph = ReaderGraph(reader_id, {} if since is None else {author_id: since},
                            frozenset({author_id}) if hidden else frozenset())
        recent = await self._judged_by(changes, reader_id, post_id, author_id)
        return judge(post, graph, recent) is Verdict.ELIGIBLE

    async def still_allows(self, reader_id: int, post_id: int, author_id: int) -> bool:
        """Whether nothing the visibility log says now hides an event already allowed
        (its creation time is in its Snowflake id), on a read younger than ``fresh_s``
        (in window mode: Postgres's answer for this post, asked no longer ago): the
        caller's write deadline (``stream.write_deadline``) starts when this returns, and
        an event it cannot write within the margin becomes ``resync``. Raises
        ``FenceUnavailable``."""
        changes = await self._fresh_changes()
        if changes is None:
            return True
        asked = time.perf_counter()
        recent = await self._judged_by(changes, reader_id, post_id, author_id)
        if changes is WINDOW and self._fresh_s is not None and time.perf_counter() - asked > self._fresh_s:
            # Window mode: Postgres's answer is the read; it must be as young as a log read.
            raise FenceUnavailable(f"the window check took longer than the commit wait's bound "
                                   f"({self._fresh_s} s)")
        return not recent.hides(post_id, author_id, ids.timestamp_ms(post_id))

    async def _judged_by(self, changes: LogView | None, reader_id: int, post_id: int,
                         author_id: int) -> ReaderChanges:
        """The fold's view for the reader, or in window mode Postgres's answer for this
        one post (fence.py)."""
        if changes is None:
            return NOTHING
        recent = changes.for_reader(reader_id)
        if recent is None:
            assert self._fence is not None
            recent = await self._fence.window(reader_id, [(post_id, author_id)])
        return recent

    async def _hidden_account(self, author_id: int) -> bool:
        """Whether the account copy says the author is suspended or deleted (a failed
        read raises, as the other reads of ``allows`` do)."""
        if self._accounts is None:
            return False
        return bool(await self._accounts.hidden_among([author_id]))

    async def _changes(self) -> LogView | None:
        return await self._fence.sync() if self._fence is not None else None

    async def _fresh_changes(self) -> LogView | None:
        fence = self._fence
        if fence is None:
            return None
        for _ in range(FRESH_READS):
            changes = await fence.sync()
            if changes is WINDOW or self._fresh_s is None or fence.answer_age() <= self._fresh_s:
                return changes
        raise FenceUnavailable(f"{FRESH_READS} reads of the visibility log each took longer "
                               f"than the commit wait's bound ({self._fresh_s} s)")
