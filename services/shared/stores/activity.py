"""Reader activity: who has read their feed lately, and which readers the fan-out skips.

Shared by the API (records reads, brings back returning readers) and the fan-out
(sweeps readers who went idle, skips them). Owner of its tables (0008_reader_activity.cql):
``reader_activity``, ``readers_by_period``, ``inactive_followers``, ``activity_sweeps``.

Time is cut into periods of ``resolution`` (a day by default). A reader whose last read
is in period ``q`` is idle once the current period is past ``q + window``, where the
window is ``inactive_after`` in periods: no read for at least ``inactive_after``.

The two sides race when a reader returns just as the sweeper judges them. Each side
writes its own fact first and then reads the other's: the API writes the last read,
then reads the state; the sweeper writes ``idle`` (and the flags), then reads the last
read again. Whichever order the four steps run in, one side sees the other and the
reader ends up active with an inbox: either the API sees ``idle`` and regenerates, or
the sweeper sees the new read and undoes its flags.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import timedelta
from typing import AsyncIterator, NamedTuple, Protocol, Sequence

from cassandra.cluster import Session

from .cql_async import CqlRunner
from .follows import FollowedAuthors, followed_by
from .read_coalescer import PartitionReads
from .statements import Cql, Statements

ACTIVE = "active"
IDLE = "idle"
REGENERATING = "regenerating"
# readers_by_period partitions per period: a day of readers spread over this many.
SHARDS = 16
# Periods past the window the index is kept for, so a sweeper that was stopped this
# long still finds the readers it has not judged (rows older than that expire).
BACKLOG_PERIODS = 7
# Flag writes in flight for one reader.
FLAGS_IN_FLIGHT = 32
SWEEP_NAME = "inactive_readers"


@dataclass(frozen=True)
class Window:
    """Period arithmetic for ``inactive_after`` at ``resolution``."""

    inactive_after: timedelta
    resolution: timedelta

    @property
    def resolution_ms(self) -> int:
        return max(1, int(self.resolution.total_seconds() * 1000))

    @property
    def periods(self) -> int:
        """Whole periods a reader must miss to be idle."""
        return max(1, math.ceil(self.inactive_after / self.resolution))

    def period(self, now_ms: int) -> int:
        return now_ms // self.resolution_ms

    def idle_through(self, now_ms: int) -> int:
        """The newest period whose readers (with no later read) are idle at ``now_ms``."""
        return self.period(now_ms) - self.periods - 1

    @property
    def index_ttl_s(self) -> int:
        """How long a readers_by_period row must live to be swept."""
        return int((self.periods + 2 + BACKLOG_PERIODS) * self.resolution_ms / 1000) + 1


@dataclass(frozen=True)
class Activity:
    last_period: int | None
    state: str
    state_at_ms: int | None


def shard_of(reader_id: int) -> int:
    return reader_id % SHARDS


class ActivityPort(Protocol):
    """What the API side (``ReaderActivity``) and the sweeper (``InactiveSweeper``) need
    of the activity tables. ``ActivityStore`` is the Cassandra one; the tests' in-memory
    one (tests/support/memory_stores.py) passes the same contract suite
    (tests/integration/test_activity_store_contract.py), so it cannot drift."""

    async def record_read(self, reader_id: int, period: int, ttl_s: int) -> None: ...
    async def record_reads(self, reads: Sequence[tuple[int, int]], ttl_s: int,
                           in_flight: int = 64) -> None: ...
    async def activity(self, reader_id: int) -> Activity: ...
    async def set_state(self, reader_id: int, state: str) -> None: ...
    async def following(self, reader_id: int) -> list[int]: ...
    async def flag(self, reader_id: int, authors: Sequence[int]) -> None: ...
    async def unflag(self, reader_id: int, authors: Sequence[int]) -> None: ...
    async def inactive_followers(self, author_id: int) -> frozenset[int]: ...
    def readers_in(self, period: int) -> AsyncIterator[list[int]]: ...
    async def swept_through(self, name: str = SWEEP_NAME) -> int | None: ...
    async def save_progress(self, period: int, name: str = SWEEP_NAME) -> None: ...


class ActivityRow(NamedTuple):
    """``ActivityStatements.read``: a reader's row of ``reader_activity``."""

    last_period: int | None
    state: str | None
    state_at_ms: int | None   # toUnixTimestamp(state_at)


class ActivityStatements(Statements):
    """Every statement on the activity tables; ``page``: rows per page."""

    # (period, reader_id)
    record = Cql("UPDATE reader_activity SET last_period=? WHERE reader_id=?")
    # (period, shard, reader_id, ttl_s)
    index = Cql("INSERT INTO readers_by_period (period, shard, reader_id) VALUES (?,?,?) "
                "USING TTL ?")
    read = Cql("SELECT last_period, state, toUnixTimestamp(state_at) FROM reader_activity "
               "WHERE reader_id=?")
    # (state, reader_id)
    set_state = Cql("UPDATE reader_activity SET state=?, state_at=toTimestamp(now()) "
                    "WHERE reader_id=?")
    in_period = Cql("SELECT reader_id FROM readers_by_period WHERE period=? AND shard=?", paged=True)
    # (followed_id, follower_id)
    flag = Cql("INSERT INTO inactive_followers (followed_id, follower_id) VALUES (?,?)")
    unflag = Cql("DELETE FROM inactive_followers WHERE followed_id=? AND follower_id=?")
    flagged = Cql("SELECT follower_id FROM inactive_followers WHERE followed_id=?", paged=True)
    # [followed_id] -> (followed_id, follower_id) (read_coalescer.py)
    flagged_in = Cql("SELECT followed_id, follower_id FROM inactive_followers WHERE followed_id IN ?",
                     paged=True)
    progress = Cql("SELECT through_period FROM activity_sweeps WHERE name=?")
    # (through_period, name)
    save_progress = Cql("UPDATE activity_sweeps SET through_period=? WHERE name=?")


class ActivityStore:
    """Every statement on the activity tables (and the follow list the flags need, from
    its owner: follows.py)."""

    def __init__(self, session: Session, runner: CqlRunner, page_size: int = 1000, *,
                 read_linger_s: float | None = None) -> None:
        self._run = runner
        self._s = ActivityStatements(session, page=page_size)
        self._followed = FollowedAuthors(session, page=page_size)
        # The fan-out's reads of the flags of concurrent posts' authors as one IN read
        # (read_coalescer.py), with a linger.
        self._flagged_in = None
        if read_linger_s is not None:
            self._flagged_in = PartitionReads(runner, self._s.flagged_in, linger_s=read_linger_s)

    # -- the API side ------------------------------------------------------------------------
    async def record_read(self, reader_id: int, period: int, ttl_s: int) -> None:
        """The reader read in ``period`` (their row, then the period's index)."""
        await self._run.execute(self._s.record, (period, reader_id))
        await self._run.execute(self._s.index, (period, shard_of(reader_id), reader_id, ttl_s))

    async def record_reads(self, reads: Sequence[tuple[int, int]], ttl_s: int,
                           in_flight: int = 64) -> None:
        """Many ``(reader_id, period)`` reads at once (a bulk load, the benchmark)."""
        await self._run.run_bounded([(self._s.record, (p, r)) for r, p in reads], in_flight)
        await self._run.run_bounded([(self._s.index, (p, shard_of(r), r, ttl_s)) for r, p in reads],
                                    in_flight)

    async def activity(self, reader_id: int) -> Activity:
        rows = await self._run.execute(self._s.read, (reader_id,))
        if not rows:
            return Activity(None, ACTIVE, None)
        row = ActivityRow._make(rows[0])
        return Activity(row.last_period, row.state or ACTIVE, row.state_at_ms)

    async def set_state(self, reader_id: int, state: str) -> None:
        await self._run.execute(self._s.set_state, (state, reader_id))

    async def following(self, reader_id: int) -> list[int]:
        return await followed_by(self._run, self._followed, reader_id)

    async def flag(self, reader_id: int, authors: Sequence[int]) -> None:
        """The fan-out skips ``reader_id`` for these authors from now on."""
        await self._run.run_bounded([(self._s.flag, (a, reader_id)) for a in authors],
                                    FLAGS_IN_FLIGHT)

    async def unflag(self, reader_id: int, authors: Sequence[int]) -> None:
        await self._run.run_bounded([(self._s.unflag, (a, reader_id)) for a in authors],
                                    FLAGS_IN_FLIGHT)

    # -- the fan-out side --------------------------------------------------------------------
    async def inactive_followers(self, author_id: int) -> frozenset[int]:
        """The author's followers the fan-out skips (one partition, paged)."""
        if self._flagged_in is not None:
            return frozenset(r[1] for r in await self._flagged_in.rows(author_id))
        out: set[int] = set()
        async for rows in self._run.pages(self._s.flagged, (author_id,)):
            out.update(r[0] for r in rows)
        return frozenset(out)

    async def readers_in(self, period: int) -> AsyncIterator[list[int]]:
        """Everyone who read in ``period`` (a reader may also have read since)."""
        for shard in range(SHARDS):
            async for rows in self._run.pages(self._s.in_period, (period, shard)):
                if rows:
                    yield [r[0] for r in rows]

    async def swept_through(self, name: str = SWEEP_NAME) -> int | None:
        rows = await self._run.execute(self._s.progress, (name,))
        return rows[0][0] if rows else None

    async def save_progress(self, period: int, name: str = SWEEP_NAME) -> None:
        await self._run.execute(self._s.save_progress, (period, name))
