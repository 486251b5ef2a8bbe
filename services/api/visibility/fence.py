"""``VisibilityFence``: each page reads the visibility log's new entries before judging.

The guarantee (docs/read-path.md, "Eligibility against the truth"): once the API has
answered 2xx to a post delete, a moderation removal, a block, a mute or an unfollow, no request that starts after that
answer, in any API process, shows the item. The write's transaction appended an entry to
``visibility_changes`` (migration 0003) before it committed, so a read of that log that
*goes out after the request arrived* sees it. ``arrive()`` and ``wait()`` give every
caller such a read:

- one read on the wire per process at a time, on one dedicated connection, shared by
  every caller it can serve: a read goes out at the end of the event loop's turn in
  which a caller arrived, for every caller of that turn; a caller that arrives while one
  is out waits for the next, sent in the turn after that one is answered (so at most
  two round trips, and under load one read serves many);
- ``arrive()`` is called when the request arrives and ``wait()`` when its window is to
  be judged: the read travels while the page does its own work, and ``wait()`` first
  looks (without awaiting) whether the answer is already there;
- a read fetches only the entries after the last one seen (``seq > last``), so a quiet
  log costs one index probe returning nothing.

Every answer also carries the log's head and the verifier's ``upto`` (visibility_log.py):

- entries at or below ``upto`` are forgotten (they left the log: verified against the
  copies and settled, migration 0004); no process forgets on its own clock;
- a head below this process's last entry means the log went back (a point-in-time
  restore, a reset sequence): the fold is dropped and the whole log read again;
- a backlog is read in chunks of ``READ_CHUNK``, each with its own ``timeout_s``;
  ``ready`` turns true once a whole read has reached the head (``/readyz`` waits for it);
- past ``max_entries`` held (the verifier stopped for long), the fold is dropped and the
  fence turns to **window mode**: ``wait()`` answers at once with ``WINDOW`` and each
  page asks Postgres for its own window instead (window_check.py), until the log is
  back under half the bound and has been read again.

Postgres unreachable or slow (no answer within ``timeout_s``): ``wait()`` raises
``FenceUnavailable`` and the page answers 503 (the stream holds its events back and asks
the client to resync). Serving on the last read instead is not safe: another process may
have acknowledged a delete between that read and Postgres going away, and no process can
know it did. The next caller connects again.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Awaitable, Callable, Protocol, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from services.shared.settings import PostgresSettings

from .recent_changes import ReaderChanges, RecentChanges
from .visibility_log import LogRead, LogReader

log = logging.getLogger(__name__)

# Entries per read: a process starting after a busy day reads its backlog in chunks.
READ_CHUNK = 10_000
# Seconds between reads that also ask for the log's head and the verifier's mark (and
# every read on a new connection, and every read in window mode): forgetting and a
# restore's detection wait at most this long; most reads skip their cost.
MARKS_EVERY_S = 0.25


class FenceUnavailable(RuntimeError):
    """The visibility log could not be read: nothing may be judged."""


class FenceMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.reads = Counter("feed_visibility_reads_total",
                             "Reads of the visibility log (shared by the pages that waited on them)",
                             ["outcome"], registry=registry)
        self.read_seconds = Histogram("feed_visibility_read_seconds",
                                      "Duration of one read of the visibility log",
                                      buckets=(.0005, .001, .002, .005, .01, .025, .05, .1, .25, 1.0),
                                      registry=registry)
        self.entries = Gauge("feed_visibility_entries",
                             "Visibility-log entries held by this process", registry=registry)
        self.resets = Counter("feed_visibility_log_resets_total",
                              "Times the log's head was below the last entry held (a restore): "
                              "the whole log read again", registry=registry)
        self.window_mode = Gauge("feed_visibility_window_mode",
                                 "1 while pages ask Postgres for their windows (the log is "
                                 "past FEED_VISIBILITY_MAX_ENTRIES)", registry=registry)
        self.read_ok = self.reads.labels("ok")


class WindowMode:
    """What ``wait()`` answers in window mode: no fold; each page asks Postgres."""

    def for_reader(self, reader_id: int) -> None:
        return None


WINDOW = WindowMode()
# What a page judges on: the fold (``RecentChanges``) or ``WINDOW``. ``for_reader``
# gives a ``ReaderChanges``, or None: ask ``VisibilityFence.window`` for each window.
LogView = RecentChanges | WindowMode
WindowCheck = Callable[[int, Sequence[tuple[int, int]]], Awaitable[ReaderChanges]]


class LogSource(Protocol):
    """Where the fence reads the log: ``LogReader`` on Postgres, a fake in unit tests."""

    def fileno(self) -> int: ...

    def send(self, seq: int, limit: int, marks: bool = False) -> bool: ...

    def flush(self) -> bool: ...

    def poll(self) -> LogRead | None: ...

    async def close(self) -> None: ...


class VisibilityFence:
    def __init__(self, settings: PostgresSettings, timeout_s: float, metrics: FenceMetrics | None = None,
                 open_source: Callable[[], Awaitable[LogSource]] | None = None,
                 max_entries: int = 500_000, window_check: WindowCheck | None = None,
                 chunk: int = READ_CHUNK, marks_every_s: float = MARKS_EVERY_S) -> None:
        self._timeout_s = timeout_s
        self._metrics = metrics
        self._open_source = open_source or (lambda: LogReader.open(settings, timeout_s))
        self._source: LogSource | None = None
        self._connecting: asyncio.Future[None] | None = None
        self.changes = RecentChanges()
        self._max_entries = max_entries
        self._window_check = window_check
        self._chunk = chunk
        self._windowed = False   # window mode: the fold was dropped, pages ask Postgres
        self._refilling = False  # ... and the log is being read again to leave it
        self._marks_at: float | None = None  # when the head and mark were last read
        self._marks_every_s = marks_every_s
        self.ready = False       # a whole read has reached the log's head
        self.head = 0            # the log's head at the last answer
        self.upto = 0            # the verifier's mark at the last answer
        self._sent = 0           # reads put on the wire (numbers burnt by a failure too)
        self._done = 0           # the last read answered
        self._failed_upto = 0    # reads up to this number failed
        self._error = ""
        self._out = False        # a read is on the wire
        self._more = False       # a caller arrived while it was: the next read is owed
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._watched: int | None = None
        self._chunks = 0         # chunks sent (each its own deadline)
        self._sent_at = 0.0
        self._answered_sent_at = float("-inf")  # when the newest answered read went out
        self._send_scheduled = False

    def arrive(self) -> int:
        """The number of a read that goes out after this call; pass it to ``wait``. The
        read goes out at the end of this turn of the event loop (or when the one on the
        wire is answered), so every caller arriving in that turn shares it. Needs the
        running event loop."""
        self._more = True
        if self._source is None:
            if self._connecting is None:
                self._connecting = asyncio.ensure_future(self._connect())
        elif not self._out:
            self._schedule_send()
        return self._sent + 1

    async def wait(self, ticket: int) -> LogView:
        """The log folded up to read ``ticket`` (or a later one); raises
        ``FenceUnavailable`` when that read failed. In window mode, ``WINDOW`` at once:
        the page's own query of its window goes out after it arrived."""
        self._poll()
        while self._done < ticket:
            if self._windowed:
                return WINDOW
            if ticket <= self._failed_upto:
                raise FenceUnavailable(self._error)
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append((ticket, waiter))
            await waiter
        return WINDOW if self._windowed else self.changes

    async def sync(self) -> LogView:
        """``wait(arrive())``: a read that goes out after this call."""
        return await self.wait(self.arrive())

    def answer_age(self) -> float:
        """Seconds since the newest answered read went out: what it returned includes
        every entry committed before then (infinite before the first answer)."""
        return time.perf_counter() - self._answered_sent_at

    # -- the read on the wire ---------------------------------------------------------------
    def _schedule_send(self) -> None:
        if not self._send_scheduled:
            self._send_scheduled = True
            asyncio.get_running_loop().call_soon(self._send_owed)

    def _send_owed(self) -> None:
        self._send_scheduled = False
        if self._more and not self._out and self._source is not None:
            self._send()

    def _send(self) -> None:
        source = self._source
        assert source is not None
        self._sent += 1
        self._out, self._more = True, False
        self._sent_at = time.perf_counter()
        loop = asyncio.get_running_loop()
        try:
            flushed = source.send(self.changes.last_seq, self._limit(), self._marks_due())
            fd = source.fileno()
        except Exception as exc:  # noqa: BLE001 - a broken connection: this read failed
            self._fail(exc)
            return
        if self._watched is None:
            loop.add_reader(fd, self._poll)
            self._watched = fd
        if not flushed:
            loop.add_writer(fd, self._flush)
        self._arm_timer()

    def _marks_due(self) -> bool:
        return (self._windowed or self._marks_at is None
                or time.perf_counter() - self._marks_at >= self._marks_every_s)

    def _limit(self) -> int:
        """Entries asked for: none in window mode (only the head and the mark)."""
        return 0 if self._windowed and not self._refilling else self._chunk

    def _arm_timer(self) -> None:
        """A deadline for the chunk just sent: each chunk of a long read has its own."""
        self._stop_timer()
        self._chunks += 1
        self._timer = asyncio.get_running_loop().call_later(self._timeout_s, self._timed_out,
                                                            self._chunks)

    def _flush(self) -> None:
        if self._source is None or self._source.flush():
            if self._watched is not None:
                asyncio.get_running_loop().remove_writer(self._watched)

    def _poll(self) -> None:
        """Takes the answer if it has arrived (the socket's reader callback, and every
        ``wait`` before it awaits)."""
        if not self._out or self._source is None:
            return
        try:
            read = self._source.poll()
            if read is None:
                return
            if self._take(read):  # more to read: the same read goes on
                if not self._source.send(self.changes.last_seq, self._limit()):
                    asyncio.get_running_loop().add_writer(self._source.fileno(), self._flush)
                self._arm_timer()
                return
        except Exception as exc:  # noqa: BLE001 - a broken connection or a failed statement
            self._fail(exc)
            return
        self._done, self._out = self._sent, False
        self._answered_sent_at = self._sent_at
        self.ready = True
        self._stop_timer()
        if self._metrics is not None:
            self._metrics.read_ok.inc()
            self._metrics.read_seconds.observe(time.perf_counter() - self._sent_at)
        self._unwatch()   # an idle connection's socket is not watched (a notice would spin)
        if self._more:
            self._schedule_send()   # for the callers that arrived while this read was out
        self._wake()

    def _take(self, read: LogRead) -> bool:
        """Folds one answer; True when the read must go on (a full chunk, a restore,
        a refill)."""
        changes = self.changes
        marked = read.head >= 0
        upto = 0
        if marked:
            self._marks_at = time.perf_counter()
            # A mark above the head belongs to a log that went back without it (a
            # sequence reset alone): it releases nothing of the new log.
            upto = read.upto if read.upto <= read.head else 0
            self.head, self.upto = read.head, upto
            if read.head < changes.last_seq:
                # The log went back (restore, reset sequence): numbers at or below our
                # last entry are new entries now. Forget everything and read it all again.
                log.warning("the visibility log's head %d is below the last entry held %d "
                            "(a restore?): reading the whole log again", read.head, changes.last_seq)
                if self._metrics is not None:
                    self._metrics.resets.inc()
                self._refold(0)
                return True
        if (marked and not self._windowed and self._window_check is not None
                and read.head - upto > self._max_entries):
            # More entries than the bound may be in the log (head - upto counts them at
            # most): window mode at once, without reading (or holding) them first.
            return self._to_window(read.head - upto)
        if self._windowed and not self._refilling:
            if not marked or read.head - upto > self._max_entries // 2:
                changes.last_seq = max(changes.last_seq, self.head)   # a restore is still seen
                return False
            log.warning("the visibility log is back under half its bound (%d entries at most): "
                        "reading it again; pages ask Postgres until that read is done",
                        read.head - upto)
            self._refilling = True
            self._refold(upto)
            return True
        if read.entries:
            changes.apply(read.entries)
        if marked:
            if upto > changes.last_seq:
                changes.last_seq = upto   # what lies below the mark left the log
            changes.forget_through(upto)
        if len(changes) > self._max_entries and self._window_check is not None:
            return self._to_window(len(changes))
        more = len(read.entries) >= self._chunk
        if not more and self._refilling:
            log.warning("the visibility log was read again (%d entries): window mode left",
                        len(changes))
            self._windowed = self._refilling = False
        if self._metrics is not None and (marked or read.entries):
            self._metrics.entries.set(len(changes))
            self._metrics.window_mode.set(1 if self._windowed else 0)
        return more

    def _to_window(self, entries: int) -> bool:
        """Window mode: the fold dropped; False (this read is done)."""
        log.warning("%d visibility-log entries (at most), past FEED_VISIBILITY_MAX_ENTRIES=%d: "
                    "window mode (each page asks Postgres for its window)", entries, self._max_entries)
        self._windowed, self._refilling = True, False
        self._refold(max(self.head, self.changes.last_seq))
        if self._metrics is not None:
            self._metrics.window_mode.set(1)
        return False

    def _refold(self, from_seq: int) -> None:
        """A new, empty fold whose next read starts after ``from_seq``."""
        self.changes = RecentChanges()
        self.changes.last_seq = from_seq
        if self._metrics is not None:
            self._metrics.entries.set(0)

    async def window(self, reader_id: int, items: Sequence[tuple[int, int]]) -> ReaderChanges:
        """Window mode: what Postgres says now of these (post_id, author_id) for the
        reader; raises ``FenceUnavailable`` when it cannot be asked."""
        if self._window_check is None:
            raise FenceUnavailable("window mode without a window check")
        try:
            return await asyncio.wait_for(self._window_check(reader_id, items), self._timeout_s)
        except Exception as exc:  # noqa: BLE001 - Postgres unreachable or slow: nothing judged
            raise FenceUnavailable(f"the window could not be checked: {exc!r}") from exc

    def _timed_out(self, chunk: int) -> None:
        self._timer = None
        if self._out and self._chunks == chunk:
            self._fail(TimeoutError(f"no answer within {self._timeout_s} s"))

    def _fail(self, exc: BaseException) -> None:
        """Every read owed so far failed: its callers get ``FenceUnavailable`` (their
        pages a 503); the connection is dropped and the next caller opens another."""
        self._failed_upto = self._sent + (1 if self._more else 0)
        self._sent = self._failed_upto   # later callers get numbers of their own
        self._out = self._more = False
        self._error = f"the visibility log could not be read: {exc!r}"
        self._stop_timer()
        self._unwatch()
        source, self._source = self._source, None
        if source is not None:
            asyncio.ensure_future(_close_quietly(source))
        if self._metrics is not None:
            self._metrics.reads.labels("failed").inc()
        self._wake()

    def _wake(self) -> None:
        waiting: list[tuple[int, asyncio.Future[None]]] = []
        for ticket, waiter in self._waiters:
            if waiter.done():
                continue
            if ticket <= self._done:
                waiter.set_result(None)
            elif ticket <= self._failed_upto:
                waiter.set_exception(FenceUnavailable(self._error))
            else:
                waiting.append((ticket, waiter))
        self._waiters = waiting

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _unwatch(self) -> None:
        if self._watched is not None:
            loop = asyncio.get_running_loop()
            loop.remove_reader(self._watched)
            loop.remove_writer(self._watched)
            self._watched = None

    async def _connect(self) -> None:
        try:
            source = await asyncio.wait_for(self._open_source(), self._timeout_s)
        except Exception as exc:  # noqa: BLE001 - Postgres unreachable: the callers' reads failed
            self._fail(exc)
        else:
            self._source = source
            self._marks_at = None   # a new connection (Postgres restarted, restored?): ask
            if self._more:
                self._schedule_send()
        finally:
            self._connecting = None

    async def close(self) -> None:
        if self._connecting is not None:
            await asyncio.gather(self._connecting, return_exceptions=True)
        self._stop_timer()
        self._unwatch()
        source, self._source = self._source, None
        if source is not None:
            await _close_quietly(source)


async def _close_quietly(source: LogSource) -> None:
    try:
        await source.close()
    except Exception:  # noqa: BLE001 - it is being thrown away
        pass
