"""The realtime hub keeps a stream's channel while the stream connects, whatever else runs."""
from __future__ import annotations

import asyncio

import pytest

from services.api.stream.hub import QUEUE_LIMIT, RESYNC, StreamEvent, StreamHub


class _Gate:
    async def allows(self, reader_id: int, post_id: int, author_id: int) -> bool:
        return True


def test_a_channel_is_not_expired_while_its_stream_reads_the_follow_list():
    async def scenario() -> None:
        reading, release = asyncio.Event(), asyncio.Event()
        clock = [10_000.0]  # long after the monotonic epoch, as on a server up for hours

        async def load_followed(reader_id: int) -> frozenset[int]:
            reading.set()
            await release.wait()  # a slow Cassandra read under load
            return frozenset({7})

        hub = StreamHub(_Gate(), load_followed, buffer_size=10, window_s=300, monotonic=lambda: clock[0])
        connecting = asyncio.create_task(hub.connect(42))
        await reading.wait()
        hub.expire_idle()  # the consumer's loop runs between polls, mid-connect
        release.set()
        queue = await connecting
        assert hub.is_open(42, queue)
        assert await hub.author_posted(7, 1001) == 1
        assert (await asyncio.wait_for(queue.get(), 1)).post_id == 1001

    asyncio.run(scenario())


def test_a_stream_whose_follows_do_not_load_opens_and_resyncs_once_they_do(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A burst of opens (or a slow node) must not refuse streams: the follow list is
    loaded in the background, and the stream told to resync once it is (events before
    were not routed to it)."""
    import services.api.stream.hub as hub_module
    monkeypatch.setattr(hub_module, "RELOAD_PAUSE_S", 0.01)

    async def scenario() -> None:
        failures = [2]

        async def load_followed(reader_id: int) -> frozenset[int]:
            if failures[0]:
                failures[0] -= 1
                raise ConnectionError("store overloaded")
            return frozenset({7})

        hub = StreamHub(_Gate(), load_followed, buffer_size=10, window_s=300)
        queue = await hub.connect(42)
        assert hub.is_open(42, queue) and not hub.routes(7, 42)
        assert await hub.author_posted(7, 1000) == 0     # missed: not routed yet
        assert await asyncio.wait_for(queue.get(), 1) is RESYNC   # loaded on the third try
        assert hub.routes(7, 42)
        assert await hub.author_posted(7, 1001) == 1
        assert (await asyncio.wait_for(queue.get(), 1)).post_id == 1001

    asyncio.run(scenario())


def test_a_cancelled_connect_leaves_no_open_queue():
    async def scenario() -> None:
        async def load_followed(reader_id: int) -> frozenset[int]:
            await asyncio.sleep(10)
            return frozenset()

        hub = StreamHub(_Gate(), load_followed, buffer_size=10, window_s=300)
        connecting = asyncio.ensure_future(hub.connect(42))
        await asyncio.sleep(0.01)
        connecting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await connecting
        assert hub.resync_all() == 0   # no stream left open to tell

    asyncio.run(scenario())


def test_resync_all_tells_every_open_stream_and_refuses_resume_from_before_the_gap():
    async def scenario() -> None:
        async def load_followed(reader_id: int) -> frozenset[int]:
            return frozenset({7})

        hub = StreamHub(_Gate(), load_followed, buffer_size=10, window_s=300)
        first, second = await hub.connect(42), await hub.connect(43)
        assert await hub.author_posted(7, 1001) == 2
        before = (await first.get()).event_id
        await second.get()
        assert not hub.resume(42, before).resync

        assert hub.resync_all() == 2
        assert await first.get() == RESYNC and await second.get() == RESYNC
        assert hub.resume(42, before).resync, "an id from before the gap must not resume"
        assert await hub.author_posted(7, 1002) == 2
        after = await first.get()
        assert isinstance(after, StreamEvent) and after.post_id == 1002
        assert not hub.resume(42, after.event_id).resync

    asyncio.run(scenario())


def test_a_stream_too_full_to_take_the_resync_is_dropped_and_resyncs_on_reconnect():
    async def scenario() -> None:
        async def load_followed(reader_id: int) -> frozenset[int]:
            return frozenset({7})

        hub = StreamHub(_Gate(), load_followed, buffer_size=QUEUE_LIMIT + 10, window_s=300)
        stuck = await hub.connect(42)
        await hub.author_posted(7, 1)
        seen = (await stuck.get()).event_id
        for post_id in range(2, QUEUE_LIMIT + 2):  # the client stops reading
            await hub.author_posted(7, post_id)
        assert stuck.full()
        assert hub.resync_all() == 0
        assert not hub.is_open(42, stuck)
        assert hub.resume(42, seen).resync

    asyncio.run(scenario())


def test_a_reader_whose_check_failed_is_told_to_resync_not_left_with_a_gap():
    class _FlakyGate:
        def __init__(self) -> None:
            self.down = False

        async def allows(self, reader_id: int, post_id: int, author_id: int) -> bool:
            if self.down:
                raise TimeoutError("post copy read timed out")
            return True

    async def scenario() -> None:
        async def load_followed(reader_id: int) -> frozenset[int]:
            return frozenset({7})

        gate = _FlakyGate()
        hub = StreamHub(gate, load_followed, buffer_size=10, window_s=300)
        queue = await hub.connect(42)
        assert await hub.author_posted(7, 1001) == 1
        before = (await queue.get()).event_id
        gate.down = True
        assert await hub.author_posted(7, 1002) == 0  # unchecked: not sent...
        assert await asyncio.wait_for(queue.get(), 1) is RESYNC  # ...but never silently
        assert hub.resume(42, before).resync  # a reconnect from before the gap resyncs too
        gate.down = False
        assert await hub.author_posted(7, 1003) == 1
        assert (await queue.get()).post_id == 1003

    asyncio.run(scenario())
