"""Inactive readers without a store: the period arithmetic, the sweeper's race with a
returning reader, the API side's once-per-period recording and announced returns, and
the fan-out's regeneration on the announcement."""
from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

from services.api.feed.activity import ReaderActivity
from services.fanout.inactive import InactiveSweeper
from services.fanout.metrics import READERS_REGENERATED, REGENERATION_SECONDS
from services.fanout.returning import ReturningReaders
from services.shared.contracts.reader_events import ReaderReturned
from services.shared.stores.activity import ACTIVE, IDLE, REGENERATING, SWEEP_NAME, Window
from tests.support.memory_stores import InMemoryActivityStore

DAY_MS = 24 * 3600 * 1000
WINDOW = Window(timedelta(days=14), timedelta(days=1))
NOW_MS = 20_000 * DAY_MS + 5_000


class FakeStore(InMemoryActivityStore):
    """The in-memory store (held to the real one by a contract suite), with a hook run
    inside ``flag`` (to stage a race), a log of the API side's calls and a failure switch."""

    def __init__(self) -> None:
        super().__init__()
        self.on_flag = lambda reader: None
        self.calls: list[str] = []
        self.fail = False

    async def record_read(self, reader_id, period, ttl_s):
        self.calls.append("record")
        if self.fail:
            raise TimeoutError("store down")
        await super().record_read(reader_id, period, ttl_s)

    async def activity(self, reader_id):
        self.calls.append("activity")
        return await super().activity(reader_id)

    async def flag(self, reader_id, authors):
        await super().flag(reader_id, authors)
        self.on_flag(reader_id)


def test_a_reader_is_idle_once_the_whole_window_has_passed_without_a_read():
    today = WINDOW.period(NOW_MS)
    assert WINDOW.periods == 14
    # Read on day today-15: 14 whole days without one since. Day today-14: not yet.
    assert WINDOW.idle_through(NOW_MS) == today - 15
    assert WINDOW.index_ttl_s > (14 + 1) * 86400  # the index outlives the window
    assert Window(timedelta(seconds=10), timedelta(days=1)).periods == 1


def _sweeper(store, rebuilt):
    async def rebuild(reader_id, authors):
        rebuilt.append((reader_id, sorted(authors)))
    return InactiveSweeper(store, WINDOW, rebuild, now_ms=lambda: NOW_MS)


def test_the_sweeper_flags_readers_without_a_later_read_and_resumes_where_it_stopped():
    store, rebuilt = FakeStore(), []
    through = WINDOW.idle_through(NOW_MS)
    store.last |= {1: through, 2: through + 3, 3: through - 2}
    store.index = {through: [1, 2], through - 2: [3]}  # 2 read then, and again since
    store.follows = {1: [10, 11], 3: [10]}
    report = asyncio.run(_sweeper(store, rebuilt).sweep())
    assert sorted(report.flagged) == [1, 3]
    assert store.flags == {(10, 1), (11, 1), (10, 3)}
    assert store.state == {1: IDLE, 3: IDLE}
    assert store.progress[SWEEP_NAME] == through and report.periods[-1] == through
    again = asyncio.run(_sweeper(store, rebuilt).sweep())
    assert again.periods == [] and again.flagged == [] and rebuilt == []


def test_a_reader_who_returns_while_being_flagged_is_unflagged_and_rebuilt():
    """The API wrote the read, then read ``active`` (before the sweeper's ``idle``): the
    sweeper's second read sees the new read and undoes its flags."""
    store, rebuilt = FakeStore(), []
    through = WINDOW.idle_through(NOW_MS)
    store.last[1] = through
    store.index = {through: [1]}
    store.follows = {1: [10, 11]}
    store.on_flag = lambda reader: store.last.__setitem__(reader, WINDOW.period(NOW_MS))
    report = asyncio.run(_sweeper(store, rebuilt).sweep())
    assert report.flagged == [] and report.undone == [1]
    assert store.flags == set() and store.state[1] == ACTIVE
    assert rebuilt == [(1, [10, 11])]


def test_a_reader_the_api_is_regenerating_is_left_to_it():
    store, rebuilt = FakeStore(), []
    through = WINDOW.idle_through(NOW_MS)
    store.last[1] = through
    store.index = {through: [1]}
    store.follows = {1: [10]}

    def came_back(reader):  # the API saw ``idle`` and announced the return
        store.last[reader] = WINDOW.period(NOW_MS)
        store.state[reader] = REGENERATING
    store.on_flag = came_back
    report = asyncio.run(_sweeper(store, rebuilt).sweep())
    assert report.undone == [] and rebuilt == []  # the fan-out unflags and rebuilds, on the event


class Clock:
    def __init__(self) -> None:
        self.ms = NOW_MS
        self.mono = 0.0


def _activity(store, clock, announce, **options):
    return ReaderActivity(store, WINDOW, announce, stale_s=120, now_ms=lambda: clock.ms,
                          monotonic=lambda: clock.mono, **options)


async def _never(reader_id):
    raise AssertionError("an active reader is not announced")


async def _settle():
    for _ in range(5):
        await asyncio.sleep(0)


def test_a_read_is_recorded_once_per_period_and_process():
    store, clock = FakeStore(), Clock()

    async def run():
        activity = _activity(store, clock, _never)
        for _ in range(5):
            assert await activity.state(7) == ACTIVE
        assert store.calls == ["record", "activity"]  # write first, then read
        clock.ms += DAY_MS  # the next day: recorded again
        assert activity.known(7) is None
        assert await activity.state(7) == ACTIVE
        assert store.calls.count("record") == 2
    asyncio.run(run())


def _idle_reader(store):
    store.state[7] = IDLE
    store.follows[7] = [10, 11]
    store.flags = {(10, 7), (11, 7)}


def test_a_returning_reader_is_announced_once_and_regenerating_until_the_fanout_is_done():
    store, clock = FakeStore(), Clock()
    _idle_reader(store)
    announced, rebuilt = [], []

    async def announce(reader_id):
        announced.append((reader_id, store.state[reader_id]))  # regenerating written first

    async def rebuild(reader_id, authors):
        rebuilt.append((reader_id, sorted(authors), set(store.flags)))  # flags gone before

    async def run():
        returned = []
        activity = _activity(store, clock, announce, on_returned=lambda: returned.append(1))
        assert await activity.state(7) == REGENERATING
        await _settle()
        assert announced == [(7, REGENERATING)] and returned == [1]
        assert activity.known(7) == REGENERATING
        clock.mono += 2  # asked again: the store still says regenerating, not announced again
        assert await activity.state(7) == REGENERATING
        await _settle()
        assert len(announced) == 1
        # The fan-out applies the event...
        fanout = ReturningReaders(store, rebuild)
        assert await fanout.on_reader_returned(ReaderReturned(7, datetime.now(timezone.utc)))
        assert store.state[7] == ACTIVE and store.flags == set()
        # ...and the next recheck serves the inbox.
        clock.mono += 2
        assert await activity.state(7) == ACTIVE
        assert activity.known(7) == ACTIVE
    asyncio.run(run())
    assert rebuilt == [(7, [10, 11], set())]


def test_the_fanout_skips_a_reader_already_active():
    store = FakeStore()
    store.state[7] = ACTIVE

    async def rebuild(reader_id, authors):
        raise AssertionError("an active reader's inbox is not rebuilt again")

    skipped = READERS_REGENERATED.labels("already_active")._value.get()
    observed = REGENERATION_SECONDS._sum.get()
    event = ReaderReturned(7, datetime.now(timezone.utc) - timedelta(seconds=3))
    assert asyncio.run(ReturningReaders(store, rebuild).on_reader_returned(event)) is False
    assert READERS_REGENERATED.labels("already_active")._value.get() == skipped + 1
    assert REGENERATION_SECONDS._sum.get() == observed  # only a real regeneration is timed


def test_the_regeneration_is_timed_from_the_return_the_api_saw():
    store = FakeStore()
    _idle_reader(store)

    async def rebuild(reader_id, authors):
        pass

    at = datetime(2026, 12, 4, 20, 0, tzinfo=timezone.utc)
    observed = REGENERATION_SECONDS._sum.get()
    fanout = ReturningReaders(store, rebuild, clock=lambda: at + timedelta(seconds=2.5))
    assert asyncio.run(fanout.on_reader_returned(ReaderReturned(7, at)))
    assert REGENERATION_SECONDS._sum.get() - observed == 2.5


def test_a_return_that_could_not_be_announced_is_announced_by_the_next_page():
    store, clock = FakeStore(), Clock()
    _idle_reader(store)
    calls, failures = [], []

    async def announce(reader_id):
        calls.append(reader_id)
        if len(calls) == 1:
            raise TimeoutError("brokers down")

    async def run():
        activity = _activity(store, clock, announce, on_failure=lambda: failures.append(1))
        assert await activity.state(7) == REGENERATING
        await _settle()
        assert calls == [7] and failures == [1] and store.state[7] == REGENERATING
        # Long before stale_s: the next page announces again, since this one failed.
        assert await activity.state(7) == REGENERATING
        await _settle()
        assert calls == [7, 7]
        clock.mono += 2
        assert await activity.state(7) == REGENERATING
        await _settle()
        assert calls == [7, 7]  # announced: left to the fan-out until stale_s
    asyncio.run(run())


def test_a_return_not_finished_after_stale_s_is_announced_again():
    store, clock = FakeStore(), Clock()
    store.state[7] = REGENERATING  # written at Unix 0; the fan-out never finished
    calls = []

    async def announce(reader_id):
        calls.append(reader_id)

    async def run():
        activity = _activity(store, clock, announce)
        assert await activity.state(7) == REGENERATING
        await _settle()
        assert calls == [7] and store.state[7] == REGENERATING
    asyncio.run(run())


def test_a_store_failure_serves_the_page_as_active_and_asks_again_later():
    store, clock = FakeStore(), Clock()
    store.fail = True
    failures = []

    async def run():
        activity = _activity(store, clock, _never, on_failure=lambda: failures.append(1))
        assert await activity.state(7) == ACTIVE
        assert activity.known(7) == ACTIVE  # not asked on every page while the store is down
        clock.mono += 61
        assert activity.known(7) is None
    asyncio.run(run())
    assert failures == [1]


def test_a_slow_store_does_not_hold_the_page():
    store, clock = FakeStore(), Clock()

    async def hang(reader_id, period, ttl_s):
        await asyncio.sleep(30)
    store.record_read = hang

    async def run():
        activity = _activity(store, clock, _never, timeout_s=0.05)
        assert await asyncio.wait_for(activity.state(7), 1) == ACTIVE
    asyncio.run(run())


def test_the_window_is_set_in_seconds_or_iso_8601_and_0_turns_it_off(monkeypatch):
    from services.shared.settings import Settings
    for raw, expected in (("0", timedelta(0)), ("1209600", timedelta(days=14)),
                          ("P14D", timedelta(days=14)), ("PT40S", timedelta(seconds=40))):
        monkeypatch.setenv("FEED_INACTIVE_AFTER", raw)
        assert Settings().inactive_after == expected
