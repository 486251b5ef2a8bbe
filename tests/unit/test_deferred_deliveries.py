"""Acks that wait for deliveries without holding the agent (services/shared/worker/batch_consumer.py
``InOrderAcks``, event_publisher.py ``delivered``), and Kafka errors that are not poison."""
from __future__ import annotations

import asyncio

import pytest
from aiokafka.errors import KafkaTimeoutError, NotLeaderForPartitionError, RecordTooLargeError

from services.shared.contracts.serving_changes import ServingChange
from services.shared.settings import Settings
from services.shared.worker.batch_consumer import InOrderAcks
from services.shared.worker.event_publisher import (deferred_deliveries, delivered,
                                                    retriable_kafka_error)
from services.shared.worker.faust_app import RawMessage
from services.shared.worker.notices import Notices
from services.shared.worker.poison_guard import GuardedProcessing, WorkerMustStop
from tests.support.fakes import RecordingPublisher


def _msgs(*offsets: int) -> list[RawMessage]:
    return [RawMessage("t.public.posts", 0, o, b"k%d" % o, b"v") for o in offsets]


def test_delivered_waits_outside_a_batch_and_only_collects_inside_one():
    async def main() -> tuple[bool, list, bool]:
        loop = asyncio.get_running_loop()
        first = loop.create_future()
        loop.call_later(0.01, first.set_result, None)
        await delivered([first])
        waited = first.done()
        second = loop.create_future()
        with deferred_deliveries() as sent:
            # Tasks started inside the block collect into the same list.
            await asyncio.gather(asyncio.ensure_future(delivered([second])))
        collected = list(sent)
        return waited, collected, second.done()

    waited, collected, second_done = asyncio.run(main())
    assert waited and len(collected) == 1 and not second_done


def test_batches_are_acked_in_order_once_their_events_are_delivered():
    async def main() -> list[int]:
        loop = asyncio.get_running_loop()
        acked: list[int] = []

        async def ack(events, msgs):
            acked.extend(m.offset for m in msgs)

        async def fail(exc):  # pragma: no cover - no delivery fails here
            raise AssertionError(exc)

        acks = InOrderAcks(ack, fail, max_unacked=100)
        slow, fast = loop.create_future(), loop.create_future()
        await acks.put(["e1"], _msgs(1), [slow])   # its event is stuck on a cut broker
        await acks.put(["e2"], _msgs(2), [fast])   # the agent went on
        fast.set_result(None)
        await asyncio.sleep(0.01)
        assert acked == [] and acks.unacked == 2   # never past the stuck one
        slow.set_result(None)
        await acks.join()
        return acked

    assert asyncio.run(main()) == [1, 2]


def test_put_waits_while_too_many_messages_are_unacked():
    async def main() -> tuple[bool, bool]:
        loop = asyncio.get_running_loop()

        async def ack(events, msgs):
            return None

        async def fail(exc):  # pragma: no cover
            raise AssertionError(exc)

        acks = InOrderAcks(ack, fail, max_unacked=2)
        stuck = loop.create_future()
        await acks.put(["a", "b"], _msgs(1, 2), [stuck])
        third = asyncio.ensure_future(acks.put(["c"], _msgs(3), [loop.create_future()]))
        await asyncio.sleep(0.01)
        blocked = not third.done()
        stuck.set_result(None)
        await asyncio.wait_for(third, 1)
        return blocked, acks.unacked == 1

    assert asyncio.run(main()) == (True, True)


def test_a_failed_delivery_stops_and_nothing_after_it_is_acked():
    async def main() -> tuple[list[int], list[BaseException], bool]:
        loop = asyncio.get_running_loop()
        acked: list[int] = []
        failures: list[BaseException] = []

        async def ack(events, msgs):
            acked.extend(m.offset for m in msgs)

        async def fail(exc):
            failures.append(exc)

        acks = InOrderAcks(ack, fail, max_unacked=100)
        bad, good = loop.create_future(), loop.create_future()
        await acks.put(["e1"], _msgs(1), [bad])
        await acks.put(["e2"], _msgs(2), [good])
        good.set_result(None)
        bad.set_exception(RecordTooLargeError())
        with pytest.raises(RecordTooLargeError):
            await acks.join()
        refused = False
        try:
            await acks.put(["e3"], _msgs(3), [])
        except RecordTooLargeError:
            refused = True
        return acked, failures, refused

    acked, failures, refused = asyncio.run(main())
    assert acked == [] and len(failures) == 1 and refused


def test_kafka_errors_that_say_try_again_are_transient_not_poison():
    assert retriable_kafka_error(KafkaTimeoutError())
    assert retriable_kafka_error(NotLeaderForPartitionError())
    assert not retriable_kafka_error(RecordTooLargeError())
    assert not retriable_kafka_error(ValueError("bad row"))

    publisher = RecordingPublisher()
    slept: list[float] = []

    async def sleep(s: float) -> None:
        slept.append(s)

    guard = GuardedProcessing(Settings(consumer_max_attempts=2, store_retry_attempts=3,
                                       store_retry_base_s=0.1), publisher, (), sleep=sleep)
    calls = 0

    async def handle(msg: RawMessage) -> None:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise KafkaTimeoutError()  # send() could not enqueue: no leader yet

    assert asyncio.run(guard.process(_msgs(1)[0], handle)) == "ok"
    assert calls == 3 and slept == [0.1, 0.2] and publisher.sent == []  # retried, no dead letter

    async def always(msg: RawMessage) -> None:
        raise NotLeaderForPartitionError()

    with pytest.raises(WorkerMustStop):
        asyncio.run(guard.process(_msgs(2)[0], always))
    assert publisher.sent == []  # a cluster outage never dead-letters a good message


def test_notices_record_what_was_acknowledged_even_when_the_batch_waits():
    class Meta:
        def __init__(self, partition: int, offset: int) -> None:
            self.partition, self.offset = partition, offset

    class Publisher:
        def __init__(self) -> None:
            self.futures: list[asyncio.Future] = []

        async def send(self, topic, key, value, headers=()):
            fut = asyncio.get_running_loop().create_future()
            self.futures.append(fut)
            return fut

    async def main() -> tuple[dict, dict, int]:
        publisher = Publisher()
        notices = Notices(publisher, "t.serving-changes")
        with deferred_deliveries() as sent:
            await notices.changed(ServingChange(posts=(7,)))
        before = dict(notices.delivered)
        publisher.futures[0].set_result(Meta(2, 41))
        await asyncio.sleep(0)
        return before, notices.delivered, len(sent)

    before, after, deferred = asyncio.run(main())
    assert before == {} and after == {2: 42} and deferred == 1
