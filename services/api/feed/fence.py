"""``VisibilityFence``: each page reads the visibility log's new entries before judging.

The guarantee (shared/DESIGN.md, "Eligibility"): once the API has answered 2xx to a post
delete, a moderation removal, a block or an unfollow, no request that starts after that
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
from typing import Awaitable, Callable, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from services.shared.clients import pg
from services.shared.settings import PostgresSettings

from .recent_changes import RecentChanges, VisibilityChange
from .visibility_log import TRIM, LogReader

log = logging.getLogger(__name__)

# Entries per read: a process starting after a busy day reads its backlog in chunks.
READ_CHUNK = 10_000


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
        self.read_ok = self.reads.labels("ok")


class LogSource(Protocol):
    """Where the fence reads the log: ``LogReader`` on Postgres, a fake in unit tests."""

    def fileno(self) -> int: ...

    def send(self, seq: int, limit: int) -> bool: ...

    def flush(self) -> bool: ...

    def poll(self) -> list[VisibilityChange] | None: ...

    async def close(self) -> None: ...


class VisibilityFence:
    def __init__(self, settings: PostgresSettings, timeout_s: float, metrics: FenceMetrics | None = None,
                 open_source: Callable[[], Awaitable[LogSource]] | None = None) -> None:
        self._timeout_s = timeout_s
        self._metrics = metrics
        self._open_source = open_source or (lambda: LogReader.open(settings, timeout_s))
        self._source: LogSource | None = None
        self._connecting: asyncio.Future[None] | None = None
        self.changes = RecentChanges()
        self._sent = 0           # reads put on the wire (numbers burnt by a failure too)
        self._done = 0           # the last read answered
        self._failed_upto = 0    # reads up to this number failed
        self._error = ""
        self._out = False        # a read is on the wire
        self._more = False       # a caller arrived while it was: the next read is owed
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._watched: int | None = None
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

    async def wait(self, ticket: int) -> RecentChanges:
        """The log folded up to read ``ticket`` (or a later one); raises
        ``FenceUnavailable`` when that read failed."""
        self._poll()
        while self._done < ticket:
            if ticket <= self._failed_upto:
                raise FenceUnavailable(self._error)
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append((ticket, waiter))
            await waiter
        return self.changes

    async def sync(self) -> RecentChanges:
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
            flushed = source.send(self.changes.last_seq, READ_CHUNK)
            fd = source.fileno()
        except Exception as exc:  # noqa: BLE001 - a broken connection: this read failed
            self._fail(exc)
            return
        if self._watched is None:
            loop.add_reader(fd, self._poll)
            self._watched = fd
        if not flushed:
            loop.add_writer(fd, self._flush)
        if self._timer is None:
            self._timer = loop.call_later(self._timeout_s, self._timed_out, self._sent)

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
            rows = self._source.poll()
            if rows is None:
                return
            if rows:
                self.changes.apply(rows)
                if self._metrics is not None:
                    self._metrics.entries.set(len(self.changes))
            if len(rows) >= READ_CHUNK:  # more behind it: the same read goes on
                if not self._source.send(self.changes.last_seq, READ_CHUNK):
                    asyncio.get_running_loop().add_writer(self._source.fileno(), self._flush)
                return
        except Exception as exc:  # noqa: BLE001 - a broken connection or a failed statement
            self._fail(exc)
            return
        self._done, self._out = self._sent, False
        self._answered_sent_at = self._sent_at
        self._stop_timer()
        if self._metrics is not None:
            self._metrics.read_ok.inc()
            self._metrics.read_seconds.observe(time.perf_counter() - self._sent_at)
        self._unwatch()   # an idle connection's socket is not watched (a notice would spin)
        if self._more:
            self._schedule_send()   # for the callers that arrived while this read was out
        self._wake()

    def _timed_out(self, number: int) -> None:
        self._timer = None
        if self._out and self._sent == number:
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
            if self._more:
                self._schedule_send()
        finally:
            self._connecting = None

    def forget_before(self, cutoff_ms: int) -> int:
        dropped = self.changes.forget_before(cutoff_ms)
        if self._metrics is not None:
            self._metrics.entries.set(len(self.changes))
        return dropped

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


async def trim_periodically(fence: VisibilityFence, settings: PostgresSettings, retention_s: float,
                            every_s: float, clock: Callable[[], float] = time.time) -> None:
    """Trims the log in Postgres (any process may; the statement is idempotent) and this
    process's folded copy of it, by age."""
    while True:
        try:
            async with await pg.async_connect(settings, autocommit=True,
                                              connect_timeout=5) as conn:
                await conn.execute(TRIM, (retention_s,))
        except Exception:  # noqa: BLE001 - next time; an untrimmed log only grows
            log.warning("the visibility log could not be trimmed", exc_info=True)
        fence.forget_before(int((clock() - retention_s) * 1000))
        await asyncio.sleep(every_s)
