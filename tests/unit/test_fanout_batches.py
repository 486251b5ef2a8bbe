"""Batches (services/shared/worker/batch_consumer.py) and the one-read transitions of follows and likes."""
from __future__ import annotations

import asyncio

import pytest

from services.fanout.tiering import OverlapMeter
from services.shared.contracts.envelope import MalformedEnvelope
from services.shared.domain.edge_transitions import EdgeState, EdgeStep, edge_step
from services.shared.settings import Settings
from services.shared.worker.batch_consumer import apply_batch, batches, key_groups
from services.shared.worker.faust_app import RawMessage
from services.shared.worker.poison_guard import GuardedProcessing, WorkerMustStop
from tests.support.fakes import RecordingPublisher, TransientError


def _msg(key: bytes | None, offset: int, partition: int = 0, value: bytes = b"v") -> RawMessage:
    return RawMessage("t.public.follows", partition, offset, key, value)


def _guard(publisher: RecordingPublisher) -> GuardedProcessing:
    s = Settings(consumer_max_attempts=2, store_retry_attempts=2, store_retry_base_s=0.0,
                 consumer_failure_window=100, consumer_max_failure_share=0.9)
    async def no_sleep(_: float) -> None:
        return None
    return GuardedProcessing(s, publisher, (TransientError,), sleep=no_sleep)


def test_key_groups_keep_each_keys_offsets_in_order():
    msgs = [_msg(b"a", 1), _msg(b"b", 2), _msg(b"a", 3), _msg(None, 4), _msg(b"b", 5), _msg(None, 6)]
    assert [[m.offset for m in g] for g in key_groups(msgs)] == [[1, 3], [2, 5], [4, 6]]


def test_same_key_changes_apply_in_order_while_keys_run_concurrently():
    applied: list[tuple[bytes, int]] = []
    running, peak = 0, 0

    async def handle(msg: RawMessage) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.01 if msg.offset % 2 else 0)  # later changes may finish first
        applied.append((msg.key, msg.offset))
        running -= 1

    msgs = [_msg(k, i) for i, k in enumerate([b"a", b"b", b"a", b"c", b"a", b"b"])]
    asyncio.run(apply_batch(msgs, _guard(RecordingPublisher()), handle, keys_in_flight=8))
    for key in (b"a", b"b", b"c"):
        offsets = [o for k, o in applied if k == key]
        assert offsets == sorted(offsets)
    assert len(applied) == 6 and peak == 3  # one change per key at a time, keys together


def test_a_poison_message_is_dead_lettered_alone_and_the_rest_of_the_batch_applies():
    pub, applied = RecordingPublisher(), []

    async def handle(msg: RawMessage) -> None:
        if msg.value == b"poison":
            raise MalformedEnvelope("bad")
        applied.append(msg.offset)

    msgs = [_msg(b"a", 1), _msg(b"a", 2, value=b"poison"), _msg(b"a", 3), _msg(b"b", 4)]
    asyncio.run(apply_batch(msgs, _guard(pub), handle, keys_in_flight=4))
    assert sorted(applied) == [1, 3, 4]
    assert [(t, h["dlq.original.offset"]) for t, _, _, h in pub.sent] == [("t.public.follows.dlq", b"2")]


def test_a_store_outage_stops_the_batch_without_finishing_it():
    applied = []

    async def handle(msg: RawMessage) -> None:
        if msg.key == b"down":
            raise TransientError("timeout")
        await asyncio.sleep(0.05)
        applied.append(msg.offset)

    msgs = [_msg(b"down", 1)] + [_msg(bytes([i]), 10 + i) for i in range(5)]
    with pytest.raises(WorkerMustStop):
        asyncio.run(apply_batch(msgs, _guard(RecordingPublisher()), handle, keys_in_flight=2))
    assert len(applied) < 5  # the rest was cancelled: the caller acks nothing of it


def test_batches_take_what_is_buffered_up_to_the_maximum():
    async def source():
        for i in range(7):
            yield i

    async def collect():
        return [b async for b in batches(source(), max_batch=3, within_s=0.05)]
    got = asyncio.run(collect())
    assert [x for b in got for x in b] == list(range(7)) and max(map(len, got)) <= 3


def test_store_retries_for_a_batch_step_then_stop():
    guard, calls = _guard(RecordingPublisher()), []

    async def flaky() -> None:
        calls.append(1)
        raise TransientError("down")
    with pytest.raises(WorkerMustStop):
        asyncio.run(guard.with_store_retries(flaky))
    assert len(calls) == 2


@pytest.mark.parametrize("stored,active,lsn,step", [
    (None, True, 10, EdgeStep(1, True, True)),                     # first follow counts
    (None, False, 10, EdgeStep(0, True, True)),                    # unfollow of unknown edge
    (EdgeState(True, 10), True, 10, EdgeStep(0, True, False)),     # replay: counts nothing
    (EdgeState(True, 10), False, 20, EdgeStep(-1, True, True)),    # unfollow
    (EdgeState(False, 20), True, 10, EdgeStep(0, False, False)),   # late follow loses
    (EdgeState(True, 10), True, 30, EdgeStep(0, True, True)),      # re-follow (snapshot)
])
def test_edge_transitions_from_one_read(stored, active, lsn, step):
    assert edge_step(stored, active, lsn) == step


def test_overlapping_fanouts_are_measured_over_their_union():
    meter = OverlapMeter(min_rows=200, min_busy_s=0.1)
    meter.started(0.0)
    meter.started(0.0)
    assert meter.wrote(0.5, 100) is None
    assert meter.wrote(1.0, 100) == (200, 1.0)  # 200 rows/s together, not 100 each
    meter.finished(1.0)
    meter.finished(1.0)
    meter.started(5.0)
    assert meter.wrote(5.5, 300) == (300, 0.5)  # idle time between is not counted
    meter.finished(5.5)


def test_a_long_fanout_does_not_credit_its_rows_to_the_last_short_window():
    # Two 10 s fan-outs of 5,000 rows each, overlapping: the store did 1,000 rows/s.
    # Counting rows only when a fan-out ends gave (5000 rows, 0.2 s) for the second one.
    meter = OverlapMeter(min_rows=200, min_busy_s=0.1)
    meter.started(0.0)
    meter.started(0.2)
    samples = []
    for tick in range(1, 101):
        now = tick * 0.1
        for _ in range(2):
            sample = meter.wrote(now, 50)
            if sample:
                samples.append(sample)
    meter.finished(10.0)
    meter.finished(10.2)
    rates = [rows / seconds for rows, seconds in samples]
    assert rates and all(900 <= r <= 1100 for r in rates), rates


def test_a_short_window_is_not_a_sample():
    meter = OverlapMeter(min_rows=200, min_busy_s=0.2)
    meter.started(0.0)
    assert meter.wrote(0.01, 500) is None  # 50,000 rows/s over 10 ms: latency, not throughput
    assert meter.wrote(0.25, 100) == (600, 0.25)


def test_store_retry_retries_one_step_and_reports_each_timeout():
    from cassandra import OperationTimedOut

    from services.shared.stores.cql_async import StoreRetry

    slept: list[float] = []

    async def sleep(s: float) -> None:
        slept.append(s)

    calls: list[int] = []
    seen: list[BaseException] = []

    async def page() -> int:
        calls.append(1)
        if len(calls) < 3:
            raise OperationTimedOut("slow node")
        return 500

    retry = StoreRetry(attempts=4, base_s=0.1, sleep=sleep)
    assert asyncio.run(retry(page, seen.append)) == 500
    assert len(calls) == 3 and len(seen) == 2 and slept == [0.1, 0.2]

    async def broken() -> int:
        raise ValueError("not a store outage")
    with pytest.raises(ValueError):
        asyncio.run(retry(broken, seen.append))
    assert len(seen) == 2  # only store timeouts are retried

    async def down() -> int:
        raise OperationTimedOut("still slow")
    with pytest.raises(OperationTimedOut):
        asyncio.run(StoreRetry(attempts=2, base_s=0.1, sleep=sleep)(down))
