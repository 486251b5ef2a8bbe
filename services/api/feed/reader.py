"""``FeedReader``: the first-page and next-page use cases behind ``GET /v1/feed``.

First page (round trips): (1) the inbox top, the reader's blocks, and which of the
celebrities (list cached for a second) and of a rotating slice of follows the reader
follows; (2) the top rows of those authors' timeline partitions; then the merge of the
``snapshot_depth`` highest rows by rank key into the snapshot (no copy is read to
rank: the rows carry their keys); (3) the current state of the first page's window, and
which of its authors the reader follows, concurrently with storing the snapshot. Next
page: verify the cursor; the snapshot from this process's cache or one point read; then
per window the same reads as (3): one round trip when the snapshot is cached. A walk
that reaches the end of a snapshot whose sources held more extends it with the next
rows strictly below its last entry (``SourceReader.after``), up to ``max_candidates``.

Latest order (``order=latest``) builds its snapshot from the same sources read deeper and
keyed by creation time (candidates.py); a cursor carries its order, and a first page that
names none uses the reader's stored preference (preferences.py).

An entry is shown only if the post is eligible now (``eligibility.judge``) and the entry
is the post's live row (``PostView.holds_row``: its key is the copy's, or the copy moved
after the snapshot was made); so a row left behind by a racing move is never shown.

Failure rules (docs/read-path.md, "Failures"): a source that cannot be read is skipped (logged,
counted, and the page says ``incomplete_candidates``); the graph is a correctness input
(blocks, unfollows), so without it the request fails with 503 instead of showing what
may be hidden; a post whose current state cannot be read ends the page before it
(``partial_page``), so nothing is skipped and nothing unchecked is shown.
"""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Awaitable, Callable, Iterable, Sequence, TypeVar, cast

from services.api.snapshots.cursor import (LATEST, RANKED, Cursor, CursorKeys, CursorRejected,
                                           decode_cursor, encode_cursor)
from services.shared.contracts.serving_changes import NO_NOTICES, ChangeSink
from services.shared.domain import ids
from services.shared.domain.ranking import Ranked
from services.shared.settings import ApiProcess
from services.shared.stores.activity import REGENERATING

from ..copies.accounts import AccountCopies, AccountsUnavailable
from ..copies.bodies import FetchResult, PostCopies
from ..copies.likes import LikesRead, PageLikes
from ..copies.names import Names, PageNames
from ..copies.post_view import PostBody, PostView
from ..copies.store import Blocks, CelebrityRow, FeedPort, SourceRow
from ..snapshots import paging, snapshot
from ..snapshots.snapshot_writer import RETRY_AFTER_S, PendingSnapshot, SnapshotWriter
from ..visibility.eligibility import ReaderGraph, Verdict, judge
from ..visibility.fence import FenceUnavailable, VisibilityFence
from ..visibility.recent_changes import NOTHING, ReaderChanges

from . import candidates as cand
from .activity import ReaderActivity
from .awaiting import settled
from .graph import GraphUnavailable, PageGraph
from .metrics import FeedMetrics
from .preferences import Preferences
from .reuse import Reused, SnapshotReuse

log = logging.getLogger(__name__)

# Share of a page expected to be lost to entries that became ineligible: one read of
# 1.5x the wanted entries usually fills the page; a shortfall reads another window.
PAGE_SLACK = 0.5


class FeedUnavailable(RuntimeError):
    """A correctness input (graph, snapshot, post states) could not be read."""


@dataclass(slots=True)
class PageItem:
    entry: Ranked
    body: PostBody
    # The post's like count and whether the reader likes it (copies/likes.py); None
    # when not read (no ``PageLikes``) or its read failed.
    like_count: int | None = None
    liked: bool | None = None
    # The author's names (copies/names.py); None when unset, not read, or the read failed.
    author_handle: str | None = None
    author_display_name: str | None = None


@dataclass
class FeedPage:
    items: list[PageItem]
    next_cursor: str | None
    feed_version: str
    generated_at: datetime
    warnings: list[str] = field(default_factory=list)
    order: str = RANKED


@dataclass
class _Walk:
    """One snapshot as a page walks it: its blob (extended in place) and when it was made."""

    reader_id: int
    version: str
    blob: bytes
    generated_at: datetime
    order: str = RANKED

    @property
    def generated_us(self) -> int:
        return int(self.generated_at.timestamp() * 1_000_000)


class FeedReader:
    def __init__(self, store: FeedPort, copies: PostCopies, settings: ApiProcess,
                 metrics: FeedMetrics, clock: Callable[[], datetime],
                 activity: ReaderActivity | None = None, reuse: SnapshotReuse | None = None,
                 notices: ChangeSink = NO_NOTICES, fence: VisibilityFence | None = None,
                 likes: PageLikes | None = None, accounts: AccountCopies | None = None,
                 names: Names | None = None) -> None:
        self._store = store
        # The account copy (copies/accounts.py): authors suspended or deleted, hidden from
        # every page; None only in unit tests of the paging logic.
        self._accounts = accounts
        # The authors' names of each page's posts, read with its windows (copies/names.py);
        # None: items carry none.
        self._names = names
        # Like counts and the reader's likes of each page's posts, read with its windows
        # (copies/likes.py); None: items carry neither.
        self._likes = likes
        # The visibility log read before a page is judged (visibility/fence.py); None only in unit
        # tests of the paging logic, where the copies are the truth.
        self._fence = fence
        # The reader's last snapshot shown again while its sources are unchanged
        # (reuse.py); None: every first page builds one.
        self._reuse = reuse
        # Reads recorded, returning inactive readers regenerated (activity.py); None: off.
        self.activity = activity
        self._copies = copies
        self._settings = settings
        self._metrics = metrics
        self._clock = clock
        self._keys = CursorKeys.parse(settings.cursor_keys.get_secret_value())
        # Stored changes are announced through ``notices`` (the serving cache's entries).
        self.preferences = Preferences(store, settings.preferences_cache_s, notices=notices)
        self._celebrities = cand.CelebrityList(store, settings.celebrities_cache_s)
        self._snapshots = snapshot.SnapshotCache(settings.snapshot_cache_size,
                                                 settings.snapshot_ttl_s)
        self._depth = settings.snapshot_depth
        self._writer = SnapshotWriter(store.save_snapshot_slot, metrics.snapshot_save_failures.inc,
                                      delay_s=settings.snapshot_write_delay_s,
                                      timeout_s=settings.snapshot_write_timeout_s,
                                      max_pending=settings.snapshot_max_pending,
                                      on_written=metrics.snapshot_write_seconds.observe)
        self._sources = cand.SourceReader(store, cand.Limits(
            depth=settings.snapshot_depth,
            per_celebrity=settings.celebrity_posts_per_author,
            max_celebrities=settings.max_celebrities,
            fallback_authors=settings.fallback_authors,
            per_fallback_author=settings.fallback_posts_per_author,
            latest_inbox=settings.inbox_cap,
            latest_per_partition=settings.latest_posts_per_partition,
            latest_depth=settings.max_candidates,
            regenerating_authors=settings.regenerating_authors))

    async def _celebrity_list(self) -> list[CelebrityRow]:
        try:
            return await self._celebrities.get()
        except Exception:  # noqa: BLE001 - served without celebrity partitions, and said so
            self._metrics.source_failures.labels("celebrities").inc()
            return []

    async def first_page(self, reader_id: int, limit: int, *, order: str | None = RANKED,
                         reason: str = "first_page", warnings: tuple[str, ...] = ()) -> FeedPage:
        """A new snapshot's first page in ``order`` (None: the reader's stored preference)."""
        fence_ticket = self._fence_read()
        if order is None:
            try:
                order = await self.preferences.feed_order(reader_id)
            except Exception:  # noqa: BLE001 - a preference is not worth failing a page for
                log.warning("preferences of reader %d could not be read", reader_id, exc_info=True)
                order, warnings = RANKED, (*warnings, "preferences_unavailable")
        now = self._clock()
        now_ms = int(now.timestamp() * 1000)
        latest = order == LATEST
        reuse = self._reuse if reason == "first_page" else None
        epoch = reuse.epoch if reuse is not None else 0
        # Started now, awaited by SourceReader.first: tasks when they go to Cassandra (they
        # then overlap the follow reads); when the cache answers them, plain coroutines
        # made once the reader's last snapshot is known not to be reusable.
        inbox: Awaitable[list[SourceRow]] | None = None
        blocks: Awaitable[Blocks] | None = None
        if not self._store.from_memory:
            inbox = asyncio.ensure_future(self._store.inbox_top(
                reader_id, self._settings.inbox_cap if latest else self._depth))
            blocks = asyncio.ensure_future(self._store.blocks(reader_id))
        regenerating = await self._regenerating(reader_id)
        if regenerating:
            warnings = (*warnings, "regenerating")
            reuse = None
        celebrities = await self._celebrity_list()
        if inbox is None or blocks is None:
            if reuse is not None:
                held = reuse.recall(reader_id, order, now, now_ms, celebrities)
                if held is not None:
                    return await self._again(held, reader_id, limit, order, warnings, fence_ticket)
            inbox = self._store.inbox_top(reader_id, self._settings.inbox_cap if latest else self._depth)
            blocks = self._store.blocks(reader_id)
        try:
            sources, blocked = await self._sources.first(reader_id, celebrities, blocks, inbox,
                                                         now_ms, latest=latest,
                                                         regenerating=regenerating)
        except GraphUnavailable as exc:
            raise FeedUnavailable(str(exc)) from exc
        failed = sources.failed_sources
        for source in failed:
            self._metrics.source_failures.labels(source).inc()
        self._metrics.snapshots.labels(reason).inc()
        self._metrics.candidates.inc(len(sources.rows))
        blob = snapshot.pack_tuples(sources.rows, sources.more, latest)
        walk = _Walk(reader_id, self._writer.place(now, len(blob)), blob, now, order)
        graph = PageGraph(self._store, reader_id, following=sources.following,
                          asked=sources.asked, blocked=blocked)
        # The snapshot is kept here and stored behind the page (snapshots/snapshot_writer.py). A
        # snapshot that one page shows whole has no next page, so it is not kept at all.
        kept = sources.more or len(sources.rows) > limit
        if kept:
            self._keep(walk)
        if reuse is not None:
            reuse.remember(reader_id, order, epoch, sources, celebrities, now_ms, walk.version,
                           walk.blob, now, kept)
        page = await self._fill(walk, 0, limit, graph, fence_ticket)
        degraded = ["incomplete_candidates"] if failed else []
        page.warnings = list(warnings) + degraded + page.warnings
        return page

    async def _again(self, held: Reused, reader_id: int, limit: int, order: str,
                     warnings: tuple[str, ...], fence_ticket: int | None) -> FeedPage:
        """The first page of the reader's last snapshot, whose sources are unchanged
        (reuse.py); the window is checked as on any page."""
        self._metrics.snapshots_reused.inc()
        cached = self._snapshots.get(reader_id, held.version, self._clock())
        blob = cached.blob if cached is not None else held.blob  # maybe extended since
        walk = _Walk(reader_id, held.version, blob, held.generated_at, order)
        if cached is None:
            entries = snapshot.PackedEntries(blob)
            if held.kept:
                self._snapshots.put(reader_id, held.version, blob, held.generated_at)
            elif entries.more or len(entries) > limit:  # a smaller page than the first one
                self._keep(walk)
                held.kept = True
        page = await self._fill(walk, 0, limit, PageGraph(self._store, reader_id), fence_ticket)
        page.warnings = list(warnings) + page.warnings
        return page

    def _fence_read(self) -> int | None:
        """A read of the visibility log that goes out after this request arrived (sent
        now if none is on the wire): it travels while the page does its own work, and
        ``_fill`` waits for it before judging the first window (visibility/fence.py)."""
        return self._fence.arrive() if self._fence is not None else None

    async def _regenerating(self, reader_id: int) -> bool:
        """Records the read; True while the reader's inbox is being regenerated."""
        if self.activity is None:
            return False
        state = self.activity.known(reader_id)
        if state is None:
            state = await self.activity.state(reader_id)
        return state == REGENERATING

    def _keep(self, walk: _Walk) -> None:
        """The snapshot in this process's cache now, and queued for Cassandra."""
        left = self._settings.snapshot_ttl_s - int((self._clock() - walk.generated_at).total_seconds())
        if left <= 0:
            return
        self._snapshots.put(walk.reader_id, walk.version, walk.blob, walk.generated_at)
        self._writer.submit(PendingSnapshot(walk.reader_id, walk.version, walk.blob,
                                            walk.generated_at, left))

    async def close(self) -> None:
        if self.activity is not None:
            await self.activity.close()
        await self._writer.close()

    async def _load(self, reader_id: int, version: str) -> tuple[bytes, datetime] | None:
        """A stored snapshot; looked for twice when missing (another process may still
        have it queued, snapshots/snapshot_writer.py). Raises ``FeedUnavailable`` on a failed read."""
        for attempt in range(2):
            try:
                stored = await self._store.load_snapshot(reader_id, version)
            except Exception as exc:  # noqa: BLE001 - a timeout or an unreachable node
                raise FeedUnavailable("the snapshot could not be read") from exc
            if stored is not None or attempt:
                return stored
            await asyncio.sleep(RETRY_AFTER_S)
        return None

    async def next_page(self, reader_id: int, limit: int, token: str,
                        order: str | None = None) -> FeedPage:
        """The page after ``token``; raises ``CursorRejected`` for a cursor not ours, or
        one of the other order than ``order`` (None: the cursor's own)."""
        cursor = decode_cursor(token, self._keys, reader_id)
        if order is not None and order != cursor.order:
            raise CursorRejected(f"cursor pages the {cursor.order} order, not {order}")
        fence_ticket = self._fence_read()
        cached = self._snapshots.get(reader_id, cursor.feed_version, self._clock())
        if cached is not None:
            blob, generated_at = cached.blob, cached.generated_at
        else:
            stored = await self._load(reader_id, cursor.feed_version)
            if stored is None:
                return await self.first_page(reader_id, limit, order=cursor.order,
                                             reason="snapshot_expired", warnings=("snapshot_expired",))
            blob, generated_at = stored
            generated_at = generated_at or self._clock()
            self._snapshots.put(reader_id, cursor.feed_version, blob, generated_at)
        try:
            entries = snapshot.PackedEntries(blob)
        except ValueError:  # a snapshot of an older format: start again
            return await self.first_page(reader_id, limit, order=cursor.order,
                                         reason="snapshot_expired", warnings=("snapshot_expired",))
        if entries.latest != (cursor.order == LATEST):
            raise CursorRejected("cursor does not match its snapshot's order")
        start = paging.start_after(entries, (cursor.rank, cursor.post_id))
        walk = _Walk(reader_id, cursor.feed_version, blob, generated_at, cursor.order)
        page = await self._fill(walk, start, limit, PageGraph(self._store, reader_id), fence_ticket)
        if await self._regenerating(reader_id):
            page.warnings.insert(0, "regenerating")
        return page

    async def _extend(self, walk: _Walk) -> snapshot.PackedEntries | None:
        """The snapshot with the next rows below its last entry, saved; None when the
        sources have nothing more (or the snapshot is at its size bound)."""
        entries = snapshot.PackedEntries(walk.blob)
        if not entries.more or not len(entries) or len(entries) >= self._settings.max_candidates:
            return None
        last = entries[len(entries) - 1]
        held = {e.post_id for e in entries}
        generated_ms = int(walk.generated_at.timestamp() * 1000)
        newest_id = ids.lowest_id_at(generated_ms + 1) - 1
        sources = await self._sources.after(
            walk.reader_id, await self._celebrity_list(), frozenset(), (last.rank, last.post_id),
            newest_id, held.__contains__, int(self._clock().timestamp() * 1000))
        for source in sources.failed_sources:
            self._metrics.source_failures.labels(source).inc()
        room = self._settings.max_candidates - len(entries)
        rows = sources.rows[:room]
        more = sources.more or len(sources.rows) > room
        if sources.failed_sources:
            more = True  # try again on the next page rather than end the walk
        walk.blob = snapshot.extend(walk.blob, rows, more and bool(rows))
        self._metrics.candidates.inc(len(rows))
        self._metrics.snapshots.labels("extended").inc()
        self._keep(walk)
        return snapshot.PackedEntries(walk.blob) if rows else None

    async def _fill(self, walk: _Walk, start: int, limit: int, graph: PageGraph,
                    fence_ticket: int | None) -> FeedPage:
        recent: ReaderChanges | None = NOTHING  # None: window mode, Postgres per window
        fence = self._fence
        if fence is not None and fence_ticket is not None:
            try:
                recent = (await fence.wait(fence_ticket)).for_reader(walk.reader_id)
            except FenceUnavailable as exc:
                raise FeedUnavailable(str(exc)) from exc
        entries: Sequence[Ranked] = snapshot.PackedEntries(walk.blob)
        latest = walk.order == LATEST
        known: dict[int, PostView] = {}
        shown: list[tuple[Ranked, PostBody]] = []
        index = start
        stalled = stale = False
        while len(shown) < limit:
            if index >= len(entries):
                extended = await self._extend(walk)
                if extended is None:
                    break
                entries = extended
            win = paging.window(entries, index, limit - len(shown), PAGE_SLACK)
            authors = {e.author_id for e in win}
            authors.discard(None)
            fetched, accounts = await self._window_reads(
                [e.post_id for e in win if e.post_id not in known], cast("set[int]", authors), graph)
            known.update(fetched.views)
            stale = stale or fetched.stale > 0
            usable = paging.until_unknown(win, fetched.failed)
            current, made_us = graph.graph, walk.generated_us
            judged = recent
            if judged is None:
                assert fence is not None
                try:
                    judged = await fence.window(walk.reader_id, _window_items(usable, known))
                except FenceUnavailable as exc:
                    raise FeedUnavailable(str(exc)) from exc
            if accounts:
                assert isinstance(accounts, frozenset)
                judged = judged.hiding_authors(accounts)
            if self._accounts is not None and fetched.views:
                # A copy's author the snapshot entry did not name (rare): asked too.
                extra = {a for v in fetched.views.values()
                         if (a := v.state.author_id) is not None and a not in authors}
                if extra:
                    try:
                        judged = judged.hiding_authors(await self._accounts.hidden_among(extra))
                    except AccountsUnavailable as exc:
                        raise FeedUnavailable(str(exc)) from exc
            got = paging.fill(usable, limit - len(shown),
                              lambda e: self._eligible(e, known.get(e.post_id), current, made_us,
                                                       latest, judged))
            shown += [(e, known[e.post_id].body) for e in got.items]  # type: ignore[misc]
            index += got.consumed
            if got.consumed == len(usable) < len(win) and len(shown) < limit:
                stalled = True
                break
        warnings: list[str] = []
        if stalled:
            self._metrics.partial_pages.inc()
            if not shown:
                raise FeedUnavailable("post copies could not be read")
            warnings.append("partial_page")
        if stale:
            warnings.append("stale_post_states")
        items = await self._dressed(walk.reader_id, shown, warnings)
        next_cursor = None
        more = paging.has_more(entries, index) or snapshot.PackedEntries(walk.blob).more
        if items and (stalled or more):
            last = items[-1].entry
            next_cursor = encode_cursor(Cursor(walk.reader_id, walk.version, last.rank, last.post_id,
                                               walk.order), self._keys)
        return FeedPage(items, next_cursor, walk.version, walk.generated_at, warnings, walk.order)

    async def _dressed(self, reader_id: int, shown: list[tuple[Ranked, PostBody]],
                       warnings: list[str]) -> list[PageItem]:
        """The page's items with their like counts, ``liked`` and authors' names, read for
        the items shown (not the windows read): both reads at once, and none when the
        process keeps them all (a warm page awaits nothing). A failed read leaves its
        fields null and adds its warning."""
        if not shown:
            return []
        likes = _PageLikes(self._likes, reader_id)
        names = PageNames(self._names)
        likes.start([e.post_id for e, _ in shown])
        names.start({body.author_id for _, body in shown})
        await likes.settle()
        await names.settle()
        read = likes.read
        counts, liked, known = read.counts, read.liked, read.known
        name_of = names.name_of
        items = []
        for e, body in shown:
            post_id = e.post_id
            name = name_of(body.author_id)
            items.append(PageItem(e, body, counts.get(post_id),
                                  (post_id in liked) if post_id in known else None,
                                  name.handle, name.display_name))
        if read.failed:
            warnings.append("likes_unavailable")
        if names.failed:
            warnings.append("names_unavailable")
        return items

    async def _window_reads(self, missing: list[int], authors: set[int],
                            graph: PageGraph) -> tuple[FetchResult, frozenset[int]]:
        """A window's post views (``missing``: the ones not known yet), its authors covered
        by ``graph``, and which of them are suspended or deleted (the account copy). Each
        answered from what the process holds when it can: a warm window creates no
        coroutine and awaits nothing. Raises ``FeedUnavailable`` when the graph or the
        account copy cannot be read; a post read that fails is in ``failed``."""
        copies, accounts = self._copies, self._accounts
        fetched = copies.held(missing) if missing else _NOTHING
        covered = graph.covers(authors)
        hidden = accounts.held(authors) if accounts is not None else frozenset()
        if fetched is not None and covered and hidden is not None:
            return fetched, hidden
        results = await settled(
            [copies.fetch(missing) if fetched is None else _ready(fetched),
             _ready(None) if covered else graph.cover(authors),
             _ready(hidden) if hidden is not None else self._hidden_accounts(authors)],
            self._store.from_memory)
        read, cover, hid = results
        if isinstance(hid, BaseException):
            raise FeedUnavailable(str(hid)) from hid
        if isinstance(cover, BaseException):
            raise FeedUnavailable(str(cover)) from cover
        if isinstance(read, BaseException):
            raise read
        return cast(FetchResult, read), cast("frozenset[int]", hid)

    async def _hidden_accounts(self, authors: Iterable[int | None]) -> frozenset[int]:
        """The authors among ``authors`` suspended or deleted, as the account copy says."""
        if self._accounts is None:
            return frozenset()
        return await self._accounts.hidden_among(authors)

    def _eligible(self, entry: Ranked, view: PostView | None, graph: ReaderGraph,
                  snapshot_us: int, latest: bool = False,
                  recent: ReaderChanges = NOTHING) -> bool:
        """Eligible now, and (ranked order) the post's live row. A latest entry is keyed
        by creation time and holds one row per post (candidates.latest_rows)."""
        verdict = judge(view.state if view else None, graph, recent)
        if verdict is Verdict.ELIGIBLE and view is not None:
            if not latest and not view.holds_row(entry.rank, snapshot_us):
                self._metrics.skipped.labels("stale_row").inc()
                return False
            if view.body is not None:
                return True
        self._metrics.skipped.labels(verdict.value).inc()
        return False


def _window_items(window: Sequence[Ranked], known: dict[int, PostView]) -> list[tuple[int, int]]:
    """(post_id, author_id) of a window, the author as ``judge`` will see it (the copy's)."""
    items = []
    for e in window:
        view = known.get(e.post_id)
        author = view.state.author_id if view is not None else None
        author = author if author is not None else e.author_id
        if author is not None:
            items.append((e.post_id, author))
    return items


class _PageLikes:
    """A page's like reads (copies/likes.py): one for its items, if the process does not
    keep them all."""

    __slots__ = ("_likes", "_reader_id", "_pending", "read")

    def __init__(self, likes: PageLikes | None, reader_id: int) -> None:
        self._likes = likes
        self._reader_id = reader_id
        self._pending: asyncio.Future[LikesRead] | None = None
        self.read = LikesRead()

    def start(self, post_ids: Sequence[int]) -> None:
        if self._likes is None or not post_ids:
            return
        if self._likes.held_into(self._reader_id, post_ids, self.read):
            return   # all kept in the process: no task, no read
        self._pending = asyncio.ensure_future(self._likes.read(self._reader_id, post_ids))

    async def settle(self) -> None:
        if self._pending is not None:
            pending, self._pending = self._pending, None
            self.read.merge(await pending)


# A window whose posts are all known already: nothing fetched (never mutated).
_NOTHING = FetchResult({}, set())

T = TypeVar("T")


async def _ready(value: T) -> T:
    return value


def utc_now() -> datetime:
    return datetime.now(timezone.utc)
