"""Post copies for a page, fetched in batches behind an in-process body cache.

``BodyCache``: what a post *says* (author, created_at, text, media ids) never changes after it is
written, so it is cached per process (bounded LRU) for as long as there is room; it is
an accelerator over Cassandra, never the only copy of anything.

What decides whether a post may be shown (visibility, deleted) and where its rows are
(its rank keys) is cached only in the serving cache, whose entries the workers'
serving-changes notices drop (serving_cache.py); without it (or while it stands aside)
every page reads the current state of every item it returns (``PostCopies.fetch``).

Reads are IN queries of ``CHUNK`` ids, issued concurrently. A chunk that fails or times
out is reported back (``failed``), never raised: the caller decides (rank by recency on
a first page; end the page before the first unknown post on a later one).
"""
from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Sequence, cast

from ..visibility.eligibility import PostState

from .post_view import PostBody, PostView
from .store import FeedPort, PostTextRow

if TYPE_CHECKING:
    from .serving_cache import ServingCache

log = logging.getLogger(__name__)

# Ids per IN query. Measured on the bench machine (300 copies, 30 runs): IN 50 p50 5.2 ms
# and 1.1 ms of client CPU; IN 25 2.2 ms CPU; single-partition reads 48 ms and 31 ms CPU
# (the driver's per-request cost dominates); IN 100-200 no faster and one slow partition
# holds a bigger share of the page. Cassandra warns past ~100 keys per IN.
CHUNK = 50


class BodyCache:
    """LRU of ``post_id -> PostBody``; an accelerator only (see the module docstring)."""

    def __init__(self, capacity: int) -> None:
        self._capacity = max(0, capacity)
        self._items: OrderedDict[int, PostBody] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def get(self, post_id: int) -> PostBody | None:
        body = self._items.get(post_id)
        if body is None:
            self.misses += 1
            return None
        self._items.move_to_end(post_id)
        self.hits += 1
        return body

    def peek(self, post_id: int) -> PostBody | None:
        """Like ``get`` without touching the LRU order or the counters (hot loops)."""
        return self._items.get(post_id)

    def put(self, post_id: int, body: PostBody) -> None:
        if self._capacity == 0:
            return
        self._items[post_id] = body
        self._items.move_to_end(post_id)
        while len(self._items) > self._capacity:
            self._items.popitem(last=False)


@dataclass
class FetchResult:
    views: dict[int, PostView]
    failed: set[int]
    # Views of posts whose read failed, as this process last knew them
    # (``ServingCache.stale_post``): how many of ``views`` are such.
    stale: int = 0


def _chunks(ids: list[int], size: int) -> Iterable[list[int]]:
    for i in range(0, len(ids), size):
        yield ids[i:i + size]


class PostCopies:
    def __init__(self, store: FeedPort, cache: BodyCache, serving: "ServingCache | None" = None) -> None:
        self._store = store
        self.cache = cache
        # Whole views, dropped by serving-changes notices (serving_cache.py): a warm page
        # builds no PostState/PostView per item and reads nothing.
        self._serving = serving

    def held(self, post_ids: Sequence[int]) -> FetchResult | None:
        """``fetch`` answered from the serving cache alone (``post_ids`` distinct), or None
        when a post must be read: a window whose views are all held needs no coroutine."""
        serving = self._serving
        if serving is None or not serving.usable:
            return None
        views = serving.posts.get_all(post_ids, serving.now())
        if views is None:
            return None
        serving.hits["post"] += len(views)
        return FetchResult(views, set())

    async def fetch(self, post_ids: Iterable[int]) -> FetchResult:
        """Current copies of ``post_ids``; ids with no copy are simply absent from ``views``."""
        wanted = list(dict.fromkeys(post_ids))
        serving = self._serving
        if serving is None:
            return await self._read(wanted)
        if not serving.usable:
            read = await self._read(wanted)
            for post_id in list(read.failed):
                view = serving.stale_post(post_id)
                if view is not None:
                    read.views[post_id] = view
                    read.failed.discard(post_id)
                    read.stale += 1
            serving.stale_served += read.stale
            return read
        now, views = serving.now(), serving.posts
        out = FetchResult({}, set())
        missing: list[int] = []
        for post_id in wanted:
            view = views.get(post_id, now)
            if view is None:
                missing.append(post_id)
            else:
                out.views[post_id] = view
        serving.hits["post"] += len(out.views)
        if missing:
            serving.misses["post"] += len(missing)
            epoch = serving.epoch
            read = await self._read(missing)
            for post_id, view in read.views.items():
                serving.fill(views, epoch, post_id, view)
            out.views.update(read.views)
            out.failed = read.failed
        return out

    async def _read(self, wanted: list[int]) -> FetchResult:
        """The copies from Cassandra (bodies from the body cache when there)."""
        cached = {p: b for p in wanted if (b := self.cache.get(p)) is not None}
        # A window (at most CHUNK posts) is one request: with text when any body is not
        # cached (the request costs more than the bytes), state alone when all are.
        if len(wanted) <= CHUNK:
            jobs = [(wanted, len(cached) < len(wanted))] if wanted else []
        else:
            uncached = [p for p in wanted if p not in cached]
            known = [p for p in wanted if p in cached]
            jobs = ([(c, True) for c in _chunks(uncached, CHUNK)]
                    + [(c, False) for c in _chunks(known, CHUNK)])
        results = await asyncio.gather(
            *(self._store.posts(chunk, with_text=with_text) for chunk, with_text in jobs),
            return_exceptions=True)
        out = FetchResult({}, set())
        for (chunk, with_text), rows in zip(jobs, results):
            if isinstance(rows, BaseException):
                log.warning("post copy read failed for %d posts: %r", len(chunk), rows)
                out.failed.update(chunk)
                continue
            asked = set(chunk)
            if any(len(row) < 8 or row[0] not in asked for row in rows):
                # Rows of another statement or of other posts: the driver once delivered
                # other requests' answers (docs/reliability.md, third session). Nothing of
                # this answer is shown; the page stops before these posts.
                log.error("post copy read for %d posts answered rows of another request", len(chunk))
                out.failed.update(chunk)
                continue
            for row in rows:
                post_id, author_id, created_ms, visibility, deleted, key, key_next, key_ts = row[:8]
                body = cached.get(post_id)
                if body is None and with_text and author_id is not None and created_ms is not None:
                    text_row = cast(PostTextRow, row)  # asked with_text: text, then media
                    media = text_row[9] if len(text_row) > 9 else None  # posts.MEDIA
                    body = PostBody(author_id, created_ms, text_row[8] or "", tuple(media or ()))
                    self.cache.put(post_id, body)
                state = PostState(post_id, author_id, created_ms, visibility, deleted)
                out.views[post_id] = PostView(state, (key, key_next), key_ts, body)
        return out
