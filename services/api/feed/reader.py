"""``FeedReader``: the first-page and next-page use cases behind ``GET /v1/feed``.

First page (round trips): (1) the reader's graph, the inbox head and the celebrity list
(cached for a second); (2) the merged author partitions; (3) only when some candidate is
new to this process: its copy (text, state, score); then rank every candidate
(``services.common.ranking``: stored score + recency; recency alone when the score or the
copy is missing) from the body cache and the score cache; (4) the current state of the
first page's window, concurrently with storing the snapshot. Next page: verify the
cursor; the snapshot from this process's cache or one point read; then, per window, the
window's post states, which of its authors the reader follows, and the reader's blocks,
all concurrently: one round trip when the snapshot is cached.

Failure rules (seed section 7): a candidate partition that cannot be read is skipped
(logged, counted, and the page says ``incomplete_candidates``); the graph is a
correctness input (blocks, unfollows), so without it the request fails with 503 instead
of showing what may be hidden; a post whose current state cannot be read ends the page
before it (``partial_page``), so nothing is skipped and nothing unchecked is shown.
"""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable, Sequence

from services.common import ids
from services.common.cursor import Cursor, CursorKeys, decode_cursor, encode_cursor
from services.common.ranking import Ranked, rank_at
from services.common.settings import Settings

from . import candidates as cand
from . import paging, snapshot
from .bodies import FetchResult, PostBody, PostCopies, PostView
from .eligibility import ReaderGraph, Verdict, judge
from .graph import GraphUnavailable, PageGraph, read_full
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


class FeedReader:
    def __init__(self, store: FeedStore, copies: PostCopies, settings: Settings,
                 metrics: FeedMetrics, clock: Callable[[], datetime]) -> None:
        self._store = store
        self._copies = copies
        self._settings = settings
        self._metrics = metrics
        self._clock = clock
        self._keys = CursorKeys.parse(settings.cursor_keys.get_secret_value())
        self._celebrities = cand.CelebrityList(store, settings.feed_celebrities_cache_s)
        self._snapshots = snapshot.SnapshotCache(settings.feed_snapshot_cache_size,
                                                 settings.feed_snapshot_ttl_s)
        self._limits = cand.Limits(
            inbox=settings.feed_inbox_candidates,
            per_celebrity=settings.feed_celebrity_posts_per_author,
            max_celebrities=settings.feed_max_celebrities,
            fallback_authors=settings.feed_fallback_authors,
            per_fallback_author=settings.feed_fallback_posts_per_author,
            max_candidates=settings.feed_max_candidates)

    async def graph(self, reader_id: int) -> ReaderGraph:
        """Follows and blocks, read together; either failing fails the request."""
        try:
            return await read_full(self._store, reader_id, self._settings.feed_max_following)
        except GraphUnavailable as exc:
            raise FeedUnavailable(str(exc)) from exc

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
        blob, count, known = await self._rank(gathered.authors_by_post, graph, now_ms)
        self._metrics.snapshots.labels(reason).inc()
        self._metrics.candidates.inc(count)
        version = snapshot.new_feed_version(now)
        # The snapshot is stored while the page's post states are read: the page does
        # not return before both are done, so a next page can always find it.
        save = asyncio.ensure_future(self._save(reader_id, version, blob, now))
        try:
            page = await self._fill(reader_id, version, snapshot.PackedEntries(blob), 0, limit,
                                    PageGraph(self._store, reader_id, graph), known)
        finally:
            await save
        page.generated_at = now
        degraded = ["incomplete_candidates"] if gathered.failed_sources else []
        page.warnings = list(warnings) + degraded + page.warnings
        return page

    async def _rank(self, authors_by_post: dict[int, int], graph: ReaderGraph, now_ms: int,
                    ) -> tuple[bytes, int, dict[int, PostView]]:
        """The packed snapshot, its size, and the copies read on the way.

        A candidate whose body is cached and whose score is fresh is ranked without a
        read; whether it may still be shown is checked when a page returns it, as for
        every entry. The others are read now and only eligible ones are kept.
        """
        peek, fresh_score = self._copies.cache.peek, self._copies.scores.fresh()
        since_of = graph.following_since_ms
        ranked: list[tuple[float, int, int | None]] = []
        unknown: list[int] = []
        for post_id, author_id in authors_by_post.items():
            body = peek(post_id)
            hit = fresh_score(post_id) if body is not None else None
            if hit is None:
                unknown.append(post_id)
            elif body.created_at_ms >= since_of.get(author_id, now_ms + 1):  # type: ignore[union-attr]
                ranked.append((rank_at(hit[1], body.created_at_ms, now_ms), post_id, author_id))  # type: ignore[union-attr]
        fetched = await self._copies.fetch(unknown) if unknown else FetchResult({}, set())
        for post_id in unknown:
            author_id = authors_by_post[post_id]
            view = fetched.views.get(post_id)
            if view is not None:
                if judge(view.state, graph) is Verdict.ELIGIBLE:
                    created = view.state.created_at_ms or ids.timestamp_ms(post_id)
                    ranked.append((rank_at(view.score, created, now_ms), post_id, author_id))
            elif post_id in fetched.failed:
                # Copy unreadable now: rank by recency; the page-time check decides.
                ranked.append((rank_at(None, ids.timestamp_ms(post_id), now_ms), post_id, author_id))
        # Feed order (ranking.sort_key): rank descending, then post_id descending; post
        # ids are unique, so plain tuple order reversed is exactly that.
        ranked.sort(reverse=True)
        return snapshot.pack_tuples(ranked), len(ranked), fetched.views

    async def _save(self, reader_id: int, version: str, blob: bytes, now: datetime) -> None:
        try:
            await self._store.save_snapshot(reader_id, version, blob, now,
                                            self._settings.feed_snapshot_ttl_s)
        except Exception:  # noqa: BLE001 - the page is still right; the next one restarts
            log.warning("snapshot save failed for reader %d", reader_id, exc_info=True)
            self._metrics.snapshot_save_failures.inc()
            return
        self._snapshots.put(reader_id, version, blob, now)

    async def next_page(self, reader_id: int, limit: int, token: str) -> FeedPage:
        """The page after ``token``; raises ``CursorRejected`` for a cursor not ours."""
        cursor = decode_cursor(token, self._keys, reader_id)
        cached = self._snapshots.get(reader_id, cursor.feed_version, self._clock())
        if cached is not None:
            blob, generated_at = cached.blob, cached.generated_at
        else:
            try:
                stored = await self._store.load_snapshot(reader_id, cursor.feed_version)
            except Exception as exc:  # noqa: BLE001 - a timeout or an unreachable node
                raise FeedUnavailable("the snapshot could not be read") from exc
            if stored is None:
                return await self.first_page(reader_id, limit, reason="snapshot_expired",
                                             warnings=("snapshot_expired",))
            blob, generated_at = stored
            self._snapshots.put(reader_id, cursor.feed_version, blob, generated_at)
        entries = snapshot.PackedEntries(blob)
        start = paging.start_after(entries, (cursor.rank, cursor.post_id))
        page = await self._fill(reader_id, cursor.feed_version, entries, start, limit,
                                PageGraph(self._store, reader_id), {})
        page.generated_at = generated_at or self._clock()
        return page

    async def _fill(self, reader_id: int, version: str, entries: Sequence[Ranked], start: int,
                    limit: int, graph: PageGraph, known: dict[int, PostView]) -> FeedPage:
        items: list[PageItem] = []
        index = start
        stalled = False
        while len(items) < limit and index < len(entries):
            win = paging.window(entries, index, limit - len(items), PAGE_SLACK)
            missing = [e.post_id for e in win if e.post_id not in known]
            fetched, covered = await asyncio.gather(
                self._copies.fetch(missing) if missing else _nothing(),
                graph.cover(e.author_id for e in win), return_exceptions=True)
            if isinstance(covered, BaseException):
                raise FeedUnavailable(str(covered)) from covered
            if isinstance(fetched, BaseException):
                raise fetched
            known.update(fetched.views)
            usable = paging.until_unknown(win, fetched.failed)
            current = graph.graph
            got = paging.fill(usable, limit - len(items),
                              lambda e: self._eligible(known.get(e.post_id), current))
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

    def _eligible(self, view: PostView | None, graph: ReaderGraph) -> bool:
        verdict = judge(view.state if view else None, graph)
        if verdict is Verdict.ELIGIBLE and view is not None and view.body is not None:
            return True
        self._metrics.skipped.labels(verdict.value).inc()
        return False


async def _nothing() -> FetchResult:
    return FetchResult({}, set())


def utc_now() -> datetime:
    return datetime.now(timezone.utc)
