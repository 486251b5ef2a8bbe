"""The reader's graph (follows, blocks) as one page needs it. Thin I/O over ``FeedStore``.

A first page needs the whole follow list (it chooses candidates with it), so it reads
the ``following`` partition and the blocks together (``read_full``). A next page only
needs the authors of the items it may return: ``PageGraph.cover`` reads which of those
the reader follows (one single-partition ``followed_id IN ?`` read) and the reader's
blocks (one small partition, once), concurrently with the post states of the same
window. Either way the graph is read on every request, never cached: an unfollow or a
block takes effect on the next page. A failed read raises ``GraphUnavailable``: without
the graph the page could show what must be hidden.
"""
from __future__ import annotations

import asyncio
from typing import Iterable

from .eligibility import ReaderGraph
from .store import FeedStore


class GraphUnavailable(RuntimeError):
    """The reader's follows or blocks could not be read."""


async def read_full(store: FeedStore, reader_id: int, max_following: int) -> ReaderGraph:
    """Every follow (up to ``max_following``) and every block of the reader."""
    following, blocked = await asyncio.gather(store.following(reader_id, max_following),
                                              store.blocked(reader_id), return_exceptions=True)
    if isinstance(following, BaseException) or isinstance(blocked, BaseException):
        raise GraphUnavailable("the reader's follows or blocks could not be read")
    return ReaderGraph(reader_id, following, blocked)


class PageGraph:
    """A ``ReaderGraph`` that is exact for every author passed to ``cover`` so far."""

    def __init__(self, store: FeedStore, reader_id: int, full: ReaderGraph | None = None) -> None:
        self._store = store
        self._reader_id = reader_id
        self._full = full
        self._following: dict[int, int] = {}
        self._asked: set[int] = set()
        self._blocked: frozenset[int] | None = None

    @property
    def graph(self) -> ReaderGraph:
        if self._full is not None:
            return self._full
        return ReaderGraph(self._reader_id, self._following, self._blocked or frozenset())

    async def cover(self, authors: Iterable[int | None]) -> None:
        """Read what is not known yet about ``authors``; raises ``GraphUnavailable``."""
        if self._full is not None:
            return
        new = sorted({a for a in authors if a is not None} - self._asked)
        reads = [self._store.following_among(self._reader_id, new)]
        if self._blocked is None:
            reads.append(self._store.blocked(self._reader_id))
        results = await asyncio.gather(*reads, return_exceptions=True)
        if any(isinstance(r, BaseException) for r in results):
            raise GraphUnavailable("the reader's follows or blocks could not be read")
        self._following.update(results[0])  # type: ignore[arg-type]
        self._asked.update(new)
        if len(results) > 1:
            self._blocked = results[1]  # type: ignore[assignment]
