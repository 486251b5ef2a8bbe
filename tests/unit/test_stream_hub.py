"""The realtime hub keeps a stream's channel while the stream connects, whatever else runs."""
from __future__ import annotations

import asyncio

import pytest

from services.api.stream.hub import StreamHub


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


def test_a_failed_connect_leaves_no_open_queue():
    async def scenario() -> None:
        async def load_followed(reader_id: int) -> frozenset[int]:
            raise ConnectionError("store down")

        hub = StreamHub(_Gate(), load_followed, buffer_size=10, window_s=300)
        with pytest.raises(ConnectionError):
            await hub.connect(42)
        assert hub.open_streams() == 0

    asyncio.run(scenario())
