"""The seek to the committed offsets also seeks the partitions that have none
(services/shared/worker/committed_seek.py): aiokafka's own seek leaves them where the
fetcher was, past what a rebalance dropped."""
import asyncio
from typing import Any

from aiokafka import TopicPartition
from aiokafka.errors import IllegalStateError
from prometheus_client import REGISTRY

from services.shared.clients import kafka
from services.shared.settings import FanoutProcess, Settings
from services.shared.worker.committed_seek import CommittedSeekConsumer
from services.shared.worker.faust_app import build_faust_app, install_consumer

FRESH, COMMITTED, AT_ZERO = (TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("t", 2))


class _AiokafkaConsumer:
    """aiokafka's two seeks, as it answers them: the committed offsets of every assigned
    partition (None: never committed), sought only where above 0."""

    def __init__(self, unassigned_meanwhile: bool = False) -> None:
        self.sought: dict[TopicPartition, int] = {}
        self.to_start: list[TopicPartition] = []
        self.unassigned_meanwhile = unassigned_meanwhile

    async def seek_to_committed(self) -> dict[TopicPartition, int | None]:
        committed = {FRESH: None, COMMITTED: 41, AT_ZERO: 0}
        self.sought = {tp: o for tp, o in committed.items() if o}
        return committed

    async def beginning_offsets(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: 7 if tp == FRESH else 0 for tp in partitions}  # FRESH's log starts at 7

    def seek(self, tp: TopicPartition, offset: int) -> None:
        if self.unassigned_meanwhile:
            raise IllegalStateError(f"Partition {tp} is not assigned")
        self.to_start.append(tp)
        self.sought[tp] = offset


class _Thread:
    """The consumer's thread: runs what it is handed, with the consumer."""

    def __init__(self, consumer: _AiokafkaConsumer) -> None:
        self.consumer = consumer
        self.calls = 0

    def _ensure_consumer(self) -> _AiokafkaConsumer:
        return self.consumer

    async def call_thread(self, fun: Any, *args: Any) -> Any:
        self.calls += 1
        return await fun(*args)

    async def seek_to_committed(self) -> Any:  # faust's own path, one thread call
        return await self.call_thread(self.consumer.seek_to_committed)


def _seeks() -> float:
    return REGISTRY.get_sample_value("feed_worker_uncommitted_partition_seeks_total") or 0.0


def _consumer(aiokafka_consumer: _AiokafkaConsumer, reset: str = "earliest") -> Any:
    app = kafka.faust_app(Settings(kafka_bootstrap="127.0.0.1:1"), f"committed-seek-{reset}",
                          consumer_auto_offset_reset=reset)
    install_consumer(app)
    consumer = app.consumer
    consumer._thread = _Thread(aiokafka_consumer)
    return consumer


def test_partitions_with_no_commit_are_sought_to_their_start_in_the_same_thread_call() -> None:
    async def main() -> None:
        inner = _AiokafkaConsumer()
        consumer = _consumer(inner)
        before = _seeks()
        committed = await consumer.seek_to_committed()
        assert committed == {FRESH: None, COMMITTED: 41, AT_ZERO: 0}  # faust's view unchanged
        assert inner.sought == {COMMITTED: 41, FRESH: 7, AT_ZERO: 0}
        assert inner.to_start == [FRESH, AT_ZERO]
        assert consumer._thread.calls == 1
        assert _seeks() == before + 2
        # faust's perform_seek, over this seek: the stale read offset of a fresh one cleared.
        consumer._read_offset[FRESH] = 97
        await consumer.perform_seek()
        assert consumer._read_offset[FRESH] is None and consumer._read_offset[COMMITTED] == 41
        assert consumer._committed_offset[COMMITTED] == 41
    asyncio.run(main())


def test_a_partition_unassigned_meanwhile_is_left_to_the_next_assignment() -> None:
    async def main() -> None:
        inner = _AiokafkaConsumer(unassigned_meanwhile=True)
        before = _seeks()
        assert (await _consumer(inner).seek_to_committed())[COMMITTED] == 41
        assert inner.to_start == [] and _seeks() == before
    asyncio.run(main())


def test_an_app_that_starts_from_the_latest_offset_is_left_as_faust_leaves_it() -> None:
    async def main() -> None:
        inner = _AiokafkaConsumer()
        await _consumer(inner, "latest").seek_to_committed()
        assert inner.sought == {COMMITTED: 41} and inner.to_start == []
    asyncio.run(main())


def test_every_worker_app_seeks_its_uncommitted_partitions() -> None:
    async def main() -> None:
        app = build_faust_app(FanoutProcess(kafka_bootstrap="127.0.0.1:1"), "committed-seek-worker")
        assert isinstance(app.consumer, CommittedSeekConsumer)
        assert app.conf.consumer_auto_offset_reset == "earliest"
    asyncio.run(main())
