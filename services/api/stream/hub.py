"""Routing of fan-out events to the SSE streams of this process, with a resume buffer.

Every API process consumes ``<prefix>.author-events`` by itself (``consumer.py``), one
record per post made readable, so a reader's stream gets its events whichever process it
is connected to, and a process reads O(posts), not O(inbox rows). ``StreamHub`` keeps
one ``ReaderChannel`` per reader seen recently:

* an author event goes to the channel of every reader whose follows contain the author,
  found through an index author -> readers with a channel here (``_by_author``). A
  reader's follows are loaded when a stream opens, re-read when a serving-changes notice
  names the reader (``follows_changed``: the fan-out wrote their follows or blocks, so
  the index trails a follow by the pipeline's freshness) and every
  ``FOLLOWED_REFRESH_HEARTBEATS`` heartbeats of an open stream (``session.py``), and dropped
  with the channel. The index only picks whom to check: a stale entry is refused by the
  check below, a missing one is a missed announcement (the next page shows the post);
* before an event is buffered or sent it passes ``StreamGate.allows``: the same
  eligibility rules as the feed (visible, not deleted, not blocked either way, still
  followed, not older than following_since), on current Cassandra copies;
* a channel keeps its last ``buffer_size`` events (ids ``<boot>-<seq>``, increasing in
  this process) while a stream is open and ``window_s`` after the last one closed, so a
  client reconnecting with ``Last-Event-ID`` gets what it missed. An id this process did
  not issue (another process, or evicted) cannot be resumed: the client is told to
  ``resync`` (refetch its first page), never silently given a gap;
* when the consumer restarts and cannot replay what it missed (``restart_plan.py``),
  ``resync_all`` puts a ``ResyncNeeded`` on every open stream's queue and starts a new
  id epoch, so an id issued before the gap cannot be resumed either.
"""
from __future__ import annotations

import asyncio
import itertools
import logging
import secrets
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Awaitable, Callable, Iterable, Protocol

log = logging.getLogger(__name__)

# Events queued for one open stream before it counts as stuck and is dropped (a client
# that reads nothing for that long reconnects and resumes from the buffer).
QUEUE_LIMIT = 256
# Concurrent eligibility checks for one author event (one per connected follower).
CHECK_CONCURRENCY = 32
# Pause between tries to load the follows of a stream opened without them.
RELOAD_PAUSE_S = 1.0


class StreamGate(Protocol):
    async def allows(self, reader_id: int, post_id: int, author_id: int) -> bool: ...


@dataclass(frozen=True)
class StreamEvent:
    event_id: str
    post_id: int
    author_id: int


@dataclass(frozen=True)
class ResyncNeeded:
    """Events for this stream may have been lost: it sends ``event: resync``."""


RESYNC = ResyncNeeded()
# What an open stream's queue carries.
StreamItem = StreamEvent | ResyncNeeded


@dataclass
class ReaderChannel:
    reader_id: int
    buffer: deque[StreamEvent]
    followed: frozenset[int] = frozenset()
    queues: set[asyncio.Queue[StreamItem]] = field(default_factory=set)
    idle_since: float = 0.0


@dataclass(frozen=True)
class Resume:
    """What a reconnect with ``Last-Event-ID`` gets: the missed events, or a resync."""

    events: list[StreamEvent]
    resync: bool


class StreamHub:
    def __init__(self, gate: StreamGate, load_followed: Callable[[int], Awaitable[frozenset[int]]],
                 buffer_size: int, window_s: float,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self._gate = gate
        self._load_followed = load_followed
        self._buffer_size = max(1, buffer_size)
        self._window_s = window_s
        self._monotonic = monotonic
        # Prefix of event ids: new for each hub (process) and at every resync_all, so an
        # id from before a gap is never resumed as if nothing had been missed.
        self._epoch = secrets.token_hex(4)
        self._seq = itertools.count(1)
        self._channels: dict[int, ReaderChannel] = {}
        self._by_author: dict[int, set[int]] = {}
        self._refresh_owed: set[int] = set()
        self._refreshing: asyncio.Future[None] | None = None
        self._unloaded: set[int] = set()   # open streams whose follows never loaded yet
        self.ready = asyncio.Event()

    # -- connections --------------------------------------------------------------------------
    async def connect(self, reader_id: int) -> asyncio.Queue[StreamItem]:
        """Open a stream for ``reader_id``; events arrive on the returned queue.

        The queue joins the channel before the follow list is read: a channel without
        queues is idle, and ``expire_idle`` (run by the consumer after every poll) could
        drop it during that read, leaving a stream that gets nothing and closes at its
        first heartbeat (the end-to-end benchmark found three of four streams lost so
        under load)."""
        channel = self._channels.get(reader_id)
        if channel is None:
            channel = ReaderChannel(reader_id, deque(maxlen=self._buffer_size),
                                    idle_since=self._monotonic())
            self._channels[reader_id] = channel
        queue: asyncio.Queue[StreamItem] = asyncio.Queue(QUEUE_LIMIT)
        channel.queues.add(queue)
        try:
            await self.refresh_followed(reader_id)
        except asyncio.CancelledError:
            self.disconnect(reader_id, queue)
            raise
        except Exception:  # noqa: BLE001 - open anyway: loaded in the background, then resync
            # A burst of opens (or a slow node) must not turn into refused streams. Until
            # the follows load, this reader's author events are not routed here; once they
            # load the stream gets ``resync``, so the client refetches what it missed.
            log.warning("follows of reader %d not loaded on open; retried in the background",
                        reader_id, exc_info=True)
            self._unloaded.add(reader_id)
            self.follows_changed([reader_id])
        return queue

    def disconnect(self, reader_id: int, queue: asyncio.Queue[StreamItem]) -> None:
        channel = self._channels.get(reader_id)
        if channel is None:
            return
        channel.queues.discard(queue)
        if not channel.queues:
            channel.idle_since = self._monotonic()
        self.expire_idle()

    async def refresh_followed(self, reader_id: int) -> None:
        """Re-read whom the reader follows (routing of author events)."""
        channel = self._channels.get(reader_id)
        if channel is None:
            return
        followed = await self._load_followed(reader_id)
        if self._channels.get(reader_id) is not channel:
            return  # expired meanwhile: nothing to index
        for author in channel.followed - followed:
            self._by_author.get(author, set()).discard(reader_id)
        for author in followed:
            self._by_author.setdefault(author, set()).add(reader_id)
        channel.followed = followed

    def follows_changed(self, users: Iterable[int]) -> None:
        """Some users' follows or blocks changed (a serving-changes notice): re-read those
        with a channel here, in one background task that drains what piles up meanwhile."""
        self._refresh_owed.update(u for u in users if u in self._channels)
        if self._refresh_owed and (self._refreshing is None or self._refreshing.done()):
            self._refreshing = asyncio.ensure_future(self._refresh_owed_followed())

    async def _refresh_owed_followed(self) -> None:
        while self._refresh_owed:
            reader_id = self._refresh_owed.pop()
            try:
                await self.refresh_followed(reader_id)
            except Exception:  # noqa: BLE001 - the heartbeat's refresh tries again
                log.warning("follow list of reader %d could not be re-read", reader_id,
                            exc_info=True)
                if reader_id in self._unloaded and reader_id in self._channels:
                    self._refresh_owed.add(reader_id)   # never loaded: again, after a pause
                    await asyncio.sleep(RELOAD_PAUSE_S)
                continue
            if reader_id in self._unloaded:
                self._unloaded.discard(reader_id)
                channel = self._channels.get(reader_id)
                if channel is not None:
                    _tell_resync(channel)   # events before the load were not routed here

    def expire_idle(self) -> None:
        """Forget channels with no stream for longer than the resume window."""
        now = self._monotonic()
        for reader_id, channel in list(self._channels.items()):
            if not channel.queues and now - channel.idle_since > self._window_s:
                for author in channel.followed:
                    self._by_author.get(author, set()).discard(reader_id)
                del self._channels[reader_id]
                self._unloaded.discard(reader_id)

    def resume(self, reader_id: int, last_event_id: str) -> Resume:
        """Events after ``last_event_id`` in this reader's buffer, or a resync."""
        channel = self._channels.get(reader_id)
        if channel is None or not last_event_id.startswith(self._epoch + "-"):
            return Resume([], True)
        ids = [e.event_id for e in channel.buffer]
        if last_event_id not in ids:
            return Resume([], True)
        return Resume(list(channel.buffer)[ids.index(last_event_id) + 1:], False)

    def routes(self, author_id: int, reader_id: int) -> bool:
        """Whether an event of ``author_id`` is checked for ``reader_id`` (the index)."""
        return reader_id in self._by_author.get(author_id, ())

    def is_open(self, reader_id: int, queue: asyncio.Queue[StreamItem]) -> bool:
        """False once the hub dropped the queue (the client stopped reading)."""
        channel = self._channels.get(reader_id)
        return channel is not None and queue in channel.queues

    def resync_all(self) -> int:
        """Events may have been lost for anyone: tell every open stream to resync.

        Also starts a new id epoch: a client that reconnects later with an id from
        before the gap is told to resync instead of resuming past it. A queue too full
        to take the signal is dropped (as for an event); its client reconnects with an
        old id and is told then. Returns the streams told."""
        self._epoch = secrets.token_hex(4)
        return sum(_tell_resync(channel) for channel in self._channels.values())

    @staticmethod
    def _resync(channel: ReaderChannel) -> None:
        """This reader may have missed an event it could not be checked for (a store
        timeout): its open streams are told to resync, and the buffer is emptied so a
        reconnect with an earlier id is told the same instead of resuming past the gap
        (found by the fault suite's cassandra-cut scenario: silent gaps)."""
        channel.buffer.clear()
        _tell_resync(channel)

    # -- events ----------------------------------------------------------------------------------
    async def author_posted(self, author_id: int, post_id: int) -> int:
        """An author event: deliver to the known followers of the author who are allowed."""
        readers = sorted(self._by_author.get(author_id, ()))
        if not readers:
            return 0
        return await self._deliver(readers, post_id, author_id)

    async def _deliver(self, readers: list[int], post_id: int, author_id: int) -> int:
        limit = asyncio.Semaphore(CHECK_CONCURRENCY)

        async def checked(reader_id: int) -> bool | None:
            async with limit:
                try:
                    return await self._gate.allows(reader_id, post_id, author_id)
                except Exception:  # noqa: BLE001 - unchecked: not sent, and the reader told
                    log.warning("stream eligibility check failed; the reader resyncs",
                                exc_info=True)
                    return None

        verdicts = await asyncio.gather(*(checked(r) for r in readers))
        sent = 0
        for reader_id, allowed in zip(readers, verdicts):
            channel = self._channels.get(reader_id)
            if channel is None:
                continue
            if allowed is None:
                self._resync(channel)
                continue
            if not allowed:
                continue
            if any(e.post_id == post_id for e in channel.buffer):
                continue  # at-least-once upstream: one event per post per reader
            event = StreamEvent(f"{self._epoch}-{next(self._seq)}", post_id, author_id)
            channel.buffer.append(event)
            for queue in list(channel.queues):
                try:
                    queue.put_nowait(event)
                except asyncio.QueueFull:
                    channel.queues.discard(queue)  # stuck client: it resumes on reconnect
            sent += 1
        return sent


def _tell_resync(channel: ReaderChannel) -> int:
    """Put ``resync`` on each of the channel's open streams; a queue too full to take it
    is dropped (its client reconnects with an old id and is told then). Returns the
    streams told."""
    told = 0
    for queue in list(channel.queues):
        try:
            queue.put_nowait(RESYNC)
            told += 1
        except asyncio.QueueFull:
            channel.queues.discard(queue)
    return told
