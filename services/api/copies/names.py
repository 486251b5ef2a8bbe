"""Authors' names on what the API shows of a post: ``author_handle`` and
``author_display_name`` of feed items, ``GET /v1/posts/{id}`` and an author's timeline.

Read from the pipeline's copy, never from Postgres per page: Cassandra ``user_profiles``
(the fan-out writes it from the users CDC topic at each change's LSN,
services/fanout/profile_events.py; owner services/shared/stores/profiles.py). A user
who set no name has no row: both fields are null.

``Names`` keeps what it read per process (an LRU of ``capacity`` users) for at most
``ttl_s`` (``FEED_NAME_CACHE_S``), and drops a user at once when a serving-changes notice
names them (``profiles``: the fan-out wrote their copy; the serving cache passes it on,
serving_cache.py ``profile_listeners``). What is missing is read in ``IN`` reads of
``CHUNK`` users, issued together: one read per page (its items' authors are far fewer
than 50), started with the page's like reads (feed/reader.py).

How old a name can be: the pipeline's lag (the profile's commit to the fan-out's write)
plus the notice's way to this process; at most that lag plus ``ttl_s`` when the notice is
lost, or while the notice consumer stands aside. A read that started before a notice and
ends after it is not kept (drops.py), so a notice is never undone by a late fill.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Iterable, Sequence

from .bodies import CHUNK
from .drops import Drops

log = logging.getLogger(__name__)

# Users whose names are kept (~150 B each).
CAPACITY = 100_000


@dataclass(frozen=True, slots=True)
class Name:
    handle: str | None
    display_name: str | None


NO_NAME = Name(None, None)

# user ids (at most CHUNK) -> their (user_id, handle, display_name) rows, those that exist
NamesRead = Callable[[list[int]], Awaitable[Sequence[Sequence[Any]]]]


class Names:
    """Names by user id: kept ``ttl_s``, dropped by notices, read in batches."""

    def __init__(self, read: NamesRead, ttl_s: float, capacity: int = CAPACITY,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self._read = read
        self._ttl_s = ttl_s
        self._capacity = max(0, capacity)
        self._monotonic = monotonic
        self._names: OrderedDict[int, tuple[float, Name]] = OrderedDict()  # user -> (expires, name)
        self._drops = Drops()
        self.hits = 0
        self.misses = 0
        self.reads = 0

    # -- the notices' side ---------------------------------------------------------------
    def drop(self, user_ids: Iterable[int] | None) -> None:
        """A notice named ``user_ids`` (None: everything, a cleared serving cache)."""
        self._drops.named(user_ids)
        if user_ids is None:
            self._names.clear()
            return
        for user_id in user_ids:
            self._names.pop(user_id, None)

    # -- the readers' side ---------------------------------------------------------------
    def held(self, user_ids: Iterable[int]) -> dict[int, Name] | None:
        """Every user's name if all are kept and fresh, else None."""
        now = self._monotonic()
        out: dict[int, Name] = {}
        names = self._names
        for user_id in user_ids:
            held = names.get(user_id)
            if held is None or held[0] <= now:
                return None
            out[user_id] = held[1]
        self.hits += len(out)
        return out

    async def of(self, user_ids: Iterable[int]) -> dict[int, Name]:
        """Every user's name (``NO_NAME`` for those without); raises when a read fails."""
        now = self._monotonic()
        out: dict[int, Name] = {}
        missing: list[int] = []
        for user_id in dict.fromkeys(user_ids):
            held = self._names.get(user_id)
            if held is not None and held[0] > now:
                out[user_id] = held[1]
            else:
                missing.append(user_id)
        self.hits += len(out)
        if not missing:
            return out
        self.misses += len(missing)
        epoch = self._drops.epoch
        chunks = [missing[i:i + CHUNK] for i in range(0, len(missing), CHUNK)]
        self.reads += len(chunks)
        if len(chunks) == 1:
            found = [await self._read(chunks[0])]
        else:
            found = list(await asyncio.gather(*(self._read(c) for c in chunks)))
        read = {int(row[0]): Name(row[1], row[2]) for rows in found for row in rows}
        expires = now + self._ttl_s
        keep = self._ttl_s > 0 and self._capacity > 0
        for user_id in missing:
            name = read.get(user_id, NO_NAME)
            out[user_id] = name
            if keep and self._drops.untouched(user_id, epoch):
                self._names[user_id] = (expires, name)
                self._names.move_to_end(user_id)
        while len(self._names) > self._capacity:
            self._names.popitem(last=False)
        return out

    async def maybe(self, user_ids: Iterable[int]) -> dict[int, Name] | None:
        """``of``, or None (logged) when the read fails: names are not worth failing a
        request for; the caller shows nulls and says ``names_unavailable``."""
        try:
            return await self.of(user_ids)
        except Exception as exc:  # noqa: BLE001 - a timeout or an unreachable node
            log.warning("author names could not be read: %r", exc)
            return None


class PageNames:
    """A page's name reads: the authors of its items, read at most once (``start``), with
    the page's like reads; none when the process keeps every name."""

    __slots__ = ("_names", "_pending", "asked", "found", "failed")

    def __init__(self, names: Names | None) -> None:
        self._names = names
        self._pending: list[asyncio.Future[dict[int, Name] | None]] = []
        self.asked: set[int] = set()
        self.found: dict[int, Name] = {}
        self.failed = False

    @property
    def enabled(self) -> bool:
        return self._names is not None

    def start(self, authors: Iterable[int | None]) -> None:
        if self._names is None:
            return
        ask = {a for a in authors if a is not None} - self.asked
        if ask:
            self.asked |= ask
            held = self._names.held(ask)
            if held is not None:   # all kept: no task, no read
                self.found.update(held)
                return
            self._pending.append(asyncio.ensure_future(self._names.maybe(ask)))

    async def settle(self) -> None:
        pending, self._pending = self._pending, []
        for future in pending:
            got = await future
            if got is None:
                self.failed = True
            else:
                self.found.update(got)

    def name_of(self, user_id: int) -> Name:
        return self.found.get(user_id, NO_NAME)


def store_reader(run: Callable[..., Awaitable[list[tuple[Any, ...]]]], names_in: Any) -> NamesRead:
    """``Names``' read on the read path's store: ``run`` is ``FeedStore.run`` (its profile
    and timeout, hedged: a read is safe to send twice), ``names_in`` the owner's prepared
    ``ProfileReads.names_in``."""
    async def read(user_ids: list[int]) -> Sequence[Sequence[Any]]:
        return await run(names_in, (user_ids,), True)
    return read
