"""``VisibilityFence``: each page reads the visibility log's new entries before judging.

The guarantee (shared/DESIGN.md, "Eligibility"): once the API has answered 2xx to a post
delete, a moderation removal, a block or an unfollow, no request that starts after that
answer, in any API process, shows the item. The write's transaction appended an entry to
``visibility_changes`` (migration 0003) before it committed, so a read of that log that
*begins after the request arrived* sees it. ``sync()`` gives every caller such a read:

- one read in flight per process at a time (single-flight), on one dedicated
  connection: concurrent pages share it;
- a caller joins only a read whose query goes out after it called; while an older read
  is in flight it waits for it to end and then joins the next one (at most two round
  trips, 1.5 on average);
- a read fetches only the entries after the last one seen (``seq > last``), so a quiet
  log costs one index probe returning nothing.

Cost under load is self-limiting: the busier the event loop, the longer each read takes
and the more pages share it (``feed_visibility_reads_total`` against pages).

Postgres unreachable or slow: ``sync()`` raises ``FenceUnavailable`` and the page
answers 503 (the stream holds its events back and asks the client to resync). Serving
on the last read instead is not safe: another process may have acknowledged a delete
between that read and Postgres going away, and no process can know it did.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Awaitable, Callable, Protocol

import psycopg
from psycopg import pq
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from .recent_changes import RecentChanges, VisibilityChange

log = logging.getLogger(__name__)

# Entries per read: a process starting after a busy day reads its backlog in chunks.
READ_CHUNK = 10_000
# Prepared once per connection (SQL PREPARE), executed through libpq directly (LogReader).
_PREPARE = ("PREPARE visibility_read(bigint, int) AS"
            " SELECT seq, (extract(epoch FROM changed_at) * 1000)::bigint, kind, subject_id,"
            " object_id, hidden, (extract(epoch FROM since) * 1000)::bigint"
            " FROM visibility_changes WHERE seq > $1 ORDER BY seq LIMIT $2")
_TRIM = "DELETE FROM visibility_changes WHERE changed_at < now() - make_interval(secs => %s)"


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
    """Where the fence reads the log from: ``LogReader`` on Postgres, a fake in unit tests."""

    async def after(self, seq: int, limit: int) -> list[VisibilityChange]: ...

    async def close(self) -> None: ...


class VisibilityFence:
    def __init__(self, dsn: str, timeout_s: float, metrics: FenceMetrics | None = None,
                 open_source: Callable[[], Awaitable[LogSource]] | None = None) -> None:
        self._timeout_s = timeout_s
        self._metrics = metrics
        self._open_source = open_source or (lambda: LogReader.open(dsn, timeout_s))
        self._source: LogSource | None = None
        self.changes = RecentChanges()
        self._started = 0          # reads created
        self._begun = 0            # the last read that has begun (its query goes out after)
        self._finished = 0         # the last read that completed
        self._flight: asyncio.Future[None] | None = None
        self._flight_number = 0

    async def sync(self) -> RecentChanges:
        """The log folded up to a read that began after this call; raises
        ``FenceUnavailable`` when that read fails."""
        # A read created but not yet begun sends its query after this call: joining it is
        # as good as starting one. A read that has begun may have missed a commit that
        # came just before this call.
        wanted = self._begun + 1
        while self._finished < wanted:
            if self._flight is None:
                self._started += 1
                self._flight_number = self._started
                self._flight = asyncio.ensure_future(self._read())
            flight, number = self._flight, self._flight_number
            try:
                await asyncio.shield(flight)
            except FenceUnavailable:
                if number >= wanted:
                    raise
        return self.changes

    async def _read(self) -> None:
        number = self._flight_number
        self._begun = number
        began = time.perf_counter()
        try:
            async with asyncio.timeout(self._timeout_s):  # no task of its own, as wait_for makes
                await self._fetch()
        except Exception as exc:  # noqa: BLE001 - any failure: the log was not read
            await self._drop_connection()
            if self._metrics is not None:
                self._metrics.reads.labels("failed").inc()
            raise FenceUnavailable(f"the visibility log could not be read: {exc!r}") from exc
        else:
            self._finished = number
            if self._metrics is not None:
                self._metrics.read_ok.inc()
                self._metrics.read_seconds.observe(time.perf_counter() - began)
        finally:
            self._flight = None

    async def _fetch(self) -> None:
        if self._source is None:
            self._source = await self._open_source()
        while True:
            rows = await self._source.after(self.changes.last_seq, READ_CHUNK)
            if rows:
                self.changes.apply(rows)
                if self._metrics is not None:
                    self._metrics.entries.set(len(self.changes))
            if len(rows) < READ_CHUNK:
                return

    async def _drop_connection(self) -> None:
        source, self._source = self._source, None
        if source is not None:
            try:
                await source.close()
            except Exception:  # noqa: BLE001 - it is being thrown away
                pass

    def forget_before(self, cutoff_ms: int) -> int:
        dropped = self.changes.forget_before(cutoff_ms)
        if self._metrics is not None:
            self._metrics.entries.set(len(self.changes))
        return dropped

    async def close(self) -> None:
        if self._flight is not None:
            await asyncio.gather(self._flight, return_exceptions=True)
        await self._drop_connection()


class LogReader:
    """``visibility_read`` run on libpq directly. Through psycopg's cursor a read cost the
    API ~150 us of CPU (cursor, adaptation, row factory), through this ~75 us (measured
    with 3,000 reads of an empty delta, 2026-12-04); a read is made for every page that
    finds none in flight, so this is most of what the fence costs a page."""

    def __init__(self, conn: psycopg.AsyncConnection[Any]) -> None:
        self._conn = conn
        self._pg = conn.pgconn
        self._pg.nonblocking = 1

    @classmethod
    async def open(cls, dsn: str, timeout_s: float) -> LogReader:
        conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True,
                                                     connect_timeout=max(1, int(timeout_s)))
        await conn.execute(_PREPARE)
        return cls(conn)

    async def close(self) -> None:
        await self._conn.close()

    async def after(self, seq: int, limit: int) -> list[VisibilityChange]:
        pg = self._pg
        pg.send_query_prepared(b"visibility_read", [b"%d" % seq, b"%d" % limit])
        while pg.flush():
            await _ready(pg.socket, write=True)
        while True:
            pg.consume_input()
            if not pg.is_busy():
                break
            await _ready(pg.socket)
        out: list[VisibilityChange] = []
        while (res := pg.get_result()) is not None:
            if res.status != pq.ExecStatus.TUPLES_OK:
                raise psycopg.OperationalError(res.error_message.decode(errors="replace"))
            for i in range(res.ntuples):
                v: list[Any] = [res.get_value(i, j) for j in range(7)]  # text format; NULL: None
                out.append(VisibilityChange(int(v[0]), int(v[1]), v[2].decode(), int(v[3]), int(v[4]),
                                            v[5] == b"t", None if v[6] is None else int(v[6])))
        return out


async def _ready(fd: int, write: bool = False) -> None:
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    (loop.add_writer if write else loop.add_reader)(fd, _settle, done)
    try:
        await done
    finally:
        (loop.remove_writer if write else loop.remove_reader)(fd)


def _settle(done: asyncio.Future[None]) -> None:
    if not done.done():
        done.set_result(None)


async def trim_periodically(fence: VisibilityFence, dsn: str, retention_s: float,
                            every_s: float, clock: Callable[[], float] = time.time) -> None:
    """Trims the log in Postgres (any process may; the statement is idempotent) and this
    process's folded copy of it, by age."""
    while True:
        try:
            async with await psycopg.AsyncConnection.connect(dsn, autocommit=True,
                                                              connect_timeout=5) as conn:
                await conn.execute(_TRIM, (retention_s,))
        except Exception:  # noqa: BLE001 - next time; an untrimmed log only grows
            log.warning("the visibility log could not be trimmed", exc_info=True)
        fence.forget_before(int((clock() - retention_s) * 1000))
        await asyncio.sleep(every_s)
