"""``FeedReader``: the first-page and next-page use cases behind ``GET /v1/feed``.

First page: read the reader's graph (follows, blocks), the inbox head and the celebrity
list concurrently; read the merged author partitions; read the candidates' copies in
batches; drop what is ineligible; rank (``services.common.ranking``: stored score +
recency, recency alone when the score or the copy is missing); store the snapshot; serve
its first page. Next page: verify the cursor, load the snapshot and the graph
concurrently, and fill a page strictly after the cursor's boundary.

Failure rules (seed section 7): a candidate partition that cannot be read is skipped
(logged, counted, and the page says ``incomplete_candidates``); the graph is a correctness input (blocks, unfollows), so without it
the request fails with 503 instead of showing what may be hidden; a post whose current
state cannot be read ends the page before it (``partial_page``), so nothing is skipped
and nothing unchecked is shown.
"""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable

from services.common import ids
from services.common.cursor import Cursor, CursorKeys, decode_cursor, encode_cursor
from services.common.ranking import Candidate, Ranked, rank_candidates
from services.common.settings import Settings

from . import candidates as cand
from . import paging, snapshot
from .bodies import PostBody, PostCopies, PostView
from .eligibility import ReaderGraph, Verdict, judge
from .metrics import FeedMetrics
from .store import FeedStore

log = logging.getLogger(__name__)

# Share of a page expected to be lost to entries that became ineligible: one read of
# 1.5x the wanted entries usually fills the page; a shortfall reads another window.
PAGE_SLACK = 0.5


class FeedUnavailable(RuntimeError):
    """A correctness input (graph, snapshot, post states) could not be read."""


@dataclass(frozen=True)
class PageItem:
    entry: Ranked
    body: PostBody


@dataclass
class FeedPage:
    items: list[PageItem]
    next_cursor: str | None
    feed_version: str
    generated_at: datetime
    warnings: list[str] = field(default_factory=list)


class CelebrityList:
    """The ``celebrities`` partition, re-read at most every ``max_age_s`` (monotonic clock)."""

    def __init__(self, store: FeedStore, max_age_s: float,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self._store = store
        self._max_age_s = max_age_s
        self._monotonic = monotonic
        self._value: list[tuple[int, int | None]] | None = None
        self._read_at = 0.0

    async def get(self) -> list[tuple[int, int | None]]:
        if self._value is not None and self._monotonic() - self._read_at < self._max_age_s:
            return self._value
        try:
            self._value = await self._store.celebrities()
            self._read_at = self._monotonic()
        except Exception:  # noqa: BLE001 - a stale list (or none) beats no feed
            if self._value is None:
                raise
            log.warning("celebrity list read failed; using the previous one", exc_info=True)
        return self._value


class FeedReader:
    def __init__(self, store: FeedStore, copies: PostCopies, settings: Settings,
                 metrics: FeedMetrics, clock: Callable[[], datetime]) -> None:
        self._store = store
        self._copies = copies
        self._settings = settings
        self._metrics = metrics
        self._clock = clock
        self._keys = CursorKeys.parse(settings.cursor_keys.get_secret_value())
        self._celebrities = CelebrityList(store, settings.feed_celebrities_cache_s)
        self._limits = cand.Limits(
            inbox=settings.feed_inbox_candidates,
            per_celebrity=settings.feed_celebrity_posts_per_author,
            max_celebrities=settings.feed_max_celebrities,
            fallback_authors=settings.feed_fallback_authors,
            per_fallback_author=settings.feed_fallback_posts_per_author,
            max_candidates=settings.feed_max_candidates)

    async def graph(self, reader_id: int) -> ReaderGraph:
        """Follows and blocks, read together; either failing fails the request."""
        following, blocked = await asyncio.gather(
            self._store.following(reader_id, self._settings.feed_max_following),
            self._store.blocked(reader_id), return_exceptions=True)
        if isinstance(following, BaseException) or isinstance(blocked, BaseException):
            raise FeedUnavailable("the reader's follows or blocks could not be read")
        return ReaderGraph(reader_id, following, blocked)

    async def first_page(self, reader_id: int, limit: int, *, reason: str = "first_page",
                         warnings: tuple[str, ...] = ()) -> FeedPage:
        now = self._clock()
        now_ms = int(now.timestamp() * 1000)
        graph_r, inbox_r, celebs_r = await asyncio.gather(
            self.graph(reader_id), self._store.inbox_head(reader_id, self._limits.inbox),
            self._celebrities.get(), return_exceptions=True)
        if isinstance(graph_r, BaseException):
            raise graph_r
        graph: ReaderGraph = graph_r
        if isinstance(celebs_r, BaseException):
            self._metrics.source_failures.labels("celebrities").inc()
            celebs_r = []
        gathered = await cand.gather(
            self._store, reader_id, graph.following_since_ms, graph.blocked,
            None if isinstance(inbox_r, BaseException) else inbox_r, celebs_r, now_ms,
            self._limits)
        for source in gathered.failed_sources:
            self._metrics.source_failures.labels(source).inc()
        fetched = await self._copies.fetch(gathered.authors_by_post)
        known: dict[int, PostView] = {}
        ranked_input: list[Candidate] = []
        for post_id, author_id in gathered.authors_by_post.items():
            view = fetched.views.get(post_id)
            if view is not None:
                if judge(view.state, graph) is not Verdict.ELIGIBLE:
                    continue
                known[post_id] = view
                created = view.state.created_at_ms or ids.timestamp_ms(post_id)
                ranked_input.append(Candidate(post_id, created, view.score, author_id))
            elif post_id in fetched.failed:
                # Copy unreadable now: rank by recency; the page-time check decides.
                ranked_input.append(Candidate(post_id, ids.timestamp_ms(post_id), None, author_id))
        entries = rank_candidates(ranked_input, now_ms)
        self._metrics.snapshots.labels(reason).inc()
        self._metrics.candidates.inc(len(entries))
        version = snapshot.new_feed_version(now)
        try:
            await self._store.save_snapshot(reader_id, version, snapshot.pack(entries), now,
                                            self._settings.feed_snapshot_ttl_s)
        except Exception:  # noqa: BLE001 - the page is still right; the next one restarts
            log.warning("snapshot save failed for reader %d", reader_id, exc_info=True)
            self._metrics.snapshot_save_failures.inc()
        page = await self._fill(reader_id, version, entries, 0, limit, graph, known)
        page.generated_at = now
        degraded = ["incomplete_candidates"] if gathered.failed_sources else []
        page.warnings = list(warnings) + degraded + page.warnings
        return page

    async def next_page(self, reader_id: int, limit: int, token: str) -> FeedPage:
        """The page after ``token``; raises ``CursorRejected`` for a cursor not ours."""
        cursor = decode_cursor(token, self._keys, reader_id)
        stored_r, graph_r = await asyncio.gather(
            self._store.load_snapshot(reader_id, cursor.feed_version), self.graph(reader_id),
            return_exceptions=True)
        if isinstance(stored_r, BaseException):
            raise FeedUnavailable("the snapshot could not be read") from stored_r
        if isinstance(graph_r, BaseException):
            raise graph_r
        if stored_r is None:
            return await self.first_page(reader_id, limit, reason="snapshot_expired",
                                         warnings=("snapshot_expired",))
        blob, generated_at = stored_r
        entries = snapshot.unpack(blob)
        start = paging.start_after(entries, (cursor.rank, cursor.post_id))
        page = await self._fill(reader_id, cursor.feed_version, entries, start, limit,
                                graph_r, {})
        page.generated_at = generated_at or self._clock()
        return page

    async def _fill(self, reader_id: int, version: str, entries: list[Ranked], start: int,
                    limit: int, graph: ReaderGraph, known: dict[int, PostView]) -> FeedPage:
        items: list[PageItem] = []
        index = start
        stalled = False
        while len(items) < limit and index < len(entries):
            win = paging.window(entries, index, limit - len(items), PAGE_SLACK)
            missing = [e.post_id for e in win if e.post_id not in known]
            failed: set[int] = set()
            if missing:
                fetched = await self._copies.fetch(missing)
                known.update(fetched.views)
                failed = fetched.failed
            usable = paging.until_unknown(win, failed)
            got = paging.fill(usable, limit - len(items),
                              lambda e: self._eligible(e, known.get(e.post_id), graph))
            items += [PageItem(e, known[e.post_id].body) for e in got.items]  # type: ignore[arg-type]
            index += got.consumed
            if got.consumed == len(usable) < len(win) and len(items) < limit:
                stalled = True
                break
        warnings: list[str] = []
        if stalled:
            self._metrics.partial_pages.inc()
            if not items:
                raise FeedUnavailable("post copies could not be read")
            warnings.append("partial_page")
        next_cursor = None
        if items and (stalled or paging.has_more(entries, index)):
            last = items[-1].entry
            next_cursor = encode_cursor(Cursor(reader_id, version, last.rank, last.post_id),
                                        self._keys)
        return FeedPage(items, next_cursor, version, self._clock(), warnings)


    def _eligible(self, entry: Ranked, view: PostView | None, graph: ReaderGraph) -> bool:
        verdict = judge(view.state if view else None, graph)
        if verdict is Verdict.ELIGIBLE and view is not None and view.body is not None:
            return True
        self._metrics.skipped.labels(verdict.value).inc()
        return False


def utc_now() -> datetime:
    return datetime.now(timezone.utc)
