"""The reader's graph (follows, blocks) as one page needs it. Thin I/O over ``FeedPort``.

Its "blocked" authors are the ones hidden from the reader's feed (``Blocks.hidden``):
blocked either way, or muted by the reader, both from the same read.

A page only needs the authors of the items it may return: ``PageGraph.cover`` reads
which of those the reader follows (one single-partition ``followed_id IN ?`` read) and
the reader's blocks (one small partition, once), concurrently with the post states of
the same window. A first page starts with what it learned while reading its sources
(the blocks, and the follows of the celebrities and the fallback slice it asked about),
so it never reads the whole follow list. Either way the graph is read on every request,
never cached: an unfollow or a block takes effect on the next page. A failed read raises
``GraphUnavailable``: without the graph the page could show what must be hidden.
"""
from __future__ import annotations

from typing import Awaitable, Iterable, Mapping, cast

from ..copies.store import Blocks, FeedPort
from ..visibility.eligibility import ReaderGraph

from .awaiting import settled


class GraphUnavailable(RuntimeError):
    """The reader's follows or blocks could not be read."""


class PageGraph:
    """A ``ReaderGraph`` that is exact for every author passed to ``cover`` so far."""

    def __init__(self, store: FeedPort, reader_id: int, *, following: dict[int, int] | None = None,
                 asked: Iterable[int] = (), blocked: frozenset[int] | None = None) -> None:
        self._store = store
        self._reader_id = reader_id
        self._following: Mapping[int, int] = dict(following or {})
        self._asked: set[int] = set(asked) | set(self._following)
        self._blocked = blocked
        # The store's whole graph, held in memory (``FeedPort.held_graph``): exact for
        # every author, so nothing more is read (and ``_following`` is not ours to update).
        self._whole = False

    @property
    def graph(self) -> ReaderGraph:
        return ReaderGraph(self._reader_id, self._following, self._blocked or frozenset())

    def covers(self, authors: Iterable[int]) -> bool:
        """Whether ``cover(authors)`` would read nothing: every author asked before and
        the blocks known, or the whole graph held by the store (taken now). A window
        that needs no read needs no coroutine either."""
        if self._whole or (self._blocked is not None and self._asked.issuperset(authors)):
            return True
        held = self._store.held_graph(self._reader_id)
        if held is None:
            return False
        self._following, blocks = held
        self._blocked = blocks.hidden
        self._whole = True
        return True

    async def cover(self, authors: Iterable[int | None]) -> None:
        """Read what is not known yet about ``authors``; raises ``GraphUnavailable``."""
        if self._whole:
            return
        new = sorted({a for a in authors if a is not None} - self._asked)
        if not new and self._blocked is not None:
            return
        reads: list[Awaitable[dict[int, int] | Blocks]] = [
            self._store.following_among(self._reader_id, new)]
        if self._blocked is None:
            reads.append(self._store.blocks(self._reader_id))
        results = await settled(reads, self._store.from_memory)
        if any(isinstance(r, BaseException) for r in results):
            raise GraphUnavailable("the reader's follows or blocks could not be read")
        cast("dict[int, int]", self._following).update(results[0])  # type: ignore[arg-type]
        self._asked.update(new)
        if len(results) > 1:
            self._blocked = results[1].hidden  # type: ignore[union-attr]
