"""``consume_in_batches``: an agent's loop over a Kafka stream.

Messages are taken in batches, split by key (one key = one source row: its changes
apply in order), keys run concurrently, each message goes through ``GuardedProcessing``
(``poison_guard``), and the batch is acked in offset order once every message is applied
or dead-lettered. ``ConsumerLag``: consumer lag per topic/partition as a Prometheus gauge.

A handler may also take part of a batch together (``Together``, ``Splitter``): whole keys
it applies in one batch step (the fan-out's old posts, services/fanout/backlog.py), while
the rest of the batch goes message by message beside it; a step that fails for good
hands its messages to the message-by-message path, each through the guard.
"""
from __future__ import annotations

import asyncio
import logging
import os
from collections import deque
from dataclasses import dataclass
from typing import (TYPE_CHECKING, Any, AsyncIterable, AsyncIterator, Awaitable, Callable, Sequence,
                    TypeVar, cast)

import faust
from prometheus_client import Gauge, Histogram

from .event_publisher import deferred_deliveries, settle
from .faust_app import RawMessage, raw_message
from .notices import batched_notices, flush_notices
from .poison_guard import GuardedProcessing, Handler, WorkerMustStop, expect_topic

if TYPE_CHECKING:
    from faust.transport.consumer import Consumer

log = logging.getLogger(__name__)
T = TypeVar("T")

LAG = Gauge("feed_consumer_lag", "Messages behind the partition end", ["topic", "partition"])
BATCH_SIZE = Histogram("feed_consumer_batch_messages", "Messages per applied batch",
                       buckets=(1, 10, 50, 100, 250, 500, 1000, 2000))
# Exit code of a worker stopped on purpose (sysexits EX_TEMPFAIL: a supervisor restarts it).
EXIT_WORKER_STOPPED = 75


# How often the consumer-lag gauge is refreshed: well under a scrape interval.
LAG_REFRESH_S = 5.0


class ConsumerLag:
    """Tracks the last processed offset per partition; ``refresh`` sets the lag gauge for
    the partitions this worker holds, and drops the series of those it no longer holds
    (with several workers a partition moves: the old holder's last value would be summed
    with the new holder's)."""

    def __init__(self) -> None:
        self._processed: dict[tuple[str, int], int] = {}
        self._exported: set[tuple[str, int]] = set()

    def processed(self, msg: RawMessage) -> None:
        self._processed[(msg.topic, msg.partition)] = msg.offset

    def refresh(self, app: faust.App) -> None:
        # The transport's Consumer (what ConsumerT always is here) keeps the committed offsets.
        consumer = cast("Consumer", app.consumer)
        held = set()
        for tp in consumer.assignment():
            held.add((tp.topic, tp.partition))
            high = consumer.highwater(tp)
            if high is None:
                continue
            done = self._processed.get((tp.topic, tp.partition))
            position = done + 1 if done is not None else (consumer._committed_offset.get(tp) or 0)
            LAG.labels(tp.topic, str(tp.partition)).set(max(0, high - position))
            self._exported.add((tp.topic, tp.partition))
        self.forget(self._exported - held)

    def forget(self, gone: set[tuple[str, int]]) -> None:
        """Partitions moved to another worker: their series and their progress here."""
        for topic, partition in gone:
            try:
                LAG.remove(topic, str(partition))
            except KeyError:
                pass
            self._exported.discard((topic, partition))
            # Another worker moves it on meanwhile: if it comes back, its committed
            # offset says where it is, not this worker's last message.
            self._processed.pop((topic, partition), None)


async def stop_worker_without_commit(app: faust.App, reason: BaseException) -> None:
    """Stop the process; the failing message was never acked, so its offset is never
    committed and it is delivered again after a restart (at-least-once)."""
    log.critical("stopping worker without committing the failing offset: %s", reason)
    try:
        await asyncio.wait_for(app.consumer.commit(), timeout=5)  # acked offsets only
    except Exception as exc:  # noqa: BLE001 - best effort; a replay is idempotent
        log.warning("commit of acked offsets before stop failed: %r", exc)
    logging.shutdown()
    os._exit(EXIT_WORKER_STOPPED)


def refresh_lag_periodically(app: faust.App, lag: Callable[[], ConsumerLag | None]) -> None:
    """A timer on ``app`` that refreshes the lag gauge every ``LAG_REFRESH_S`` once the
    worker's ``ConsumerLag`` exists (``lag()`` is None before its agents opened it)."""

    @app.timer(interval=LAG_REFRESH_S)
    async def refresh_lag() -> None:
        current = lag()
        if current is not None:
            current.refresh(app)


def key_groups(msgs: Sequence[RawMessage]) -> list[list[RawMessage]]:
    """A batch split by message key, each group in offset order. One key is one primary
    key (one source row), so its changes must apply in order; different keys may not.
    Messages without a key share one group per partition (kept in order)."""
    groups: dict[tuple[str, int, bytes | None], list[RawMessage]] = {}
    for msg in msgs:
        groups.setdefault((msg.topic, msg.partition, msg.key), []).append(msg)
    return list(groups.values())


async def apply_batch(msgs: Sequence[RawMessage], guard: GuardedProcessing, handle: Handler,
                      keys_in_flight: int) -> None:
    """Apply a batch: keys concurrently (at most ``keys_in_flight``), each key's messages
    one after another, each message through ``guard`` (a poison message is dead-lettered
    alone). ``WorkerMustStop`` from any key cancels the rest and is raised."""
    waiting = deque(key_groups(msgs))

    async def worker() -> None:  # a pool of workers, not a task per key behind a semaphore
        while waiting:
            for msg in waiting.popleft():
                await guard.process(msg, handle)

    workers = min(max(1, keys_in_flight), len(waiting))
    if workers:
        await _until_first_error([worker() for _ in range(workers)])


@dataclass
class Together:
    """What a batch step took of a batch: its messages (whole keys, so each key's changes
    stay on one path and in order) and the step that applies them together. The step
    must be idempotent as a whole: a transient store error runs it again from the start,
    and a step that fails otherwise is followed by its messages one by one."""

    msgs: list[RawMessage]
    apply: Callable[[], Awaitable[None]]


# A batch in, what a step takes of it together (None: nothing) and the messages left
# for the message-by-message path. Pure work (parsing, deciding): no I/O.
Splitter = Callable[[Sequence[RawMessage]], "tuple[Together | None, list[RawMessage]]"]


async def apply_split_batch(msgs: Sequence[RawMessage], guard: GuardedProcessing, handle: Handler,
                            keys_in_flight: int, split: Splitter) -> None:
    """Apply a batch part together, part message by message (``apply_batch``), the two at
    once. The part taken together is one step under the guard's store retries
    (``with_store_retries``: a store that stays down stops the worker, nothing of the
    batch acked); any other error from it hands its messages to ``apply_batch``, where a
    poison message is dead-lettered alone and the others apply one by one (every effect
    is idempotent, so what the failed step wrote is written again, the same)."""
    together, rest = split(msgs)
    if together is None or not together.msgs:
        await apply_batch(msgs, guard, handle, keys_in_flight)
        return

    async def taken(step: Together) -> None:
        try:
            await guard.with_store_retries(step.apply)
        except WorkerMustStop:
            raise
        except Exception as exc:  # noqa: BLE001 - not transient: each message on its own
            log.warning("a batch step failed (%r); its %d messages go one by one",
                        exc, len(step.msgs))
            await apply_batch(step.msgs, guard, handle, keys_in_flight)
            return
        guard.applied_together(step.msgs)

    await _until_first_error([taken(together), apply_batch(rest, guard, handle, keys_in_flight)])


async def _until_first_error(work: Sequence[Awaitable[None]]) -> None:
    """Run ``work`` at once; the first error cancels the rest and is raised."""
    tasks = [asyncio.ensure_future(w) for w in work]
    done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    for task in done:
        if task.exception() is not None:
            raise task.exception()  # type: ignore[misc]


async def batches(events: AsyncIterable[T], max_batch: int, within_s: float) -> AsyncIterator[list[T]]:
    """Group an async stream into lists: whatever is buffered (at most ``max_batch``),
    waiting up to ``within_s`` for more only while the batch is short. A background task
    reads ahead into a queue of ``max_batch``, so under load the next batch is full as
    soon as the previous one is done, and at low load a message waits ``within_s`` at most."""
    queue: asyncio.Queue[T] = asyncio.Queue(maxsize=max(1, max_batch))

    async def read_ahead() -> None:
        async for item in events:
            await queue.put(item)

    reader = asyncio.ensure_future(read_ahead())
    loop = asyncio.get_running_loop()
    try:
        while True:
            if queue.empty():
                getter = asyncio.ensure_future(queue.get())
                await asyncio.wait({getter, reader}, return_when=asyncio.FIRST_COMPLETED)
                if not getter.done():
                    getter.cancel()
                    reader.result()  # the stream failed (raises) or ended
                    return
                batch = [getter.result()]
            else:
                batch = [queue.get_nowait()]
            deadline = loop.time() + within_s
            while len(batch) < max_batch:
                if not queue.empty():
                    batch.append(queue.get_nowait())
                    continue
                remaining = deadline - loop.time()
                if remaining <= 0 or reader.done():
                    break
                try:
                    batch.append(await asyncio.wait_for(queue.get(), remaining))
                except asyncio.TimeoutError:
                    break
            BATCH_SIZE.observe(len(batch))
            yield batch
    finally:
        reader.cancel()


async def consume_in_batches(app: faust.App, stream: faust.StreamT[bytes], guard: GuardedProcessing,
                             lag: ConsumerLag, handle: Handler, *, max_batch: int, within_s: float,
                             keys_in_flight: int,
                             finish_batch: Callable[[], Awaitable[None]] | None = None,
                             max_unacked: int = 5000, split: Splitter | None = None) -> None:
    """An agent's loop: batches of messages applied by ``apply_batch`` (order per key,
    keys concurrent), then ``finish_batch`` (work shared by the batch, e.g. one rescore
    per post), then the batch's serving-changes notices, merged (notices.py), then every
    message of the batch is acked in offset order. Nothing of a
    batch is acked before all of it is done: ``WorkerMustStop``, or any error outside
    the per-message guard, stops the process without committing it (at-least-once; a
    replayed batch is idempotent). The acks of a batch wait for the events it sent
    (``InOrderAcks``) while the next batches apply, up to ``max_unacked`` messages.
    ``split``: what of each batch is applied together (``apply_split_batch``)."""
    for topic in getattr(stream.channel, "topics", ()):
        expect_topic(topic)
    # An agent is always handed a faust.Stream; noack is not part of StreamT.
    manual = cast("faust.Stream[bytes]", stream).noack()

    async def ack(events: list[Any], msgs: list[RawMessage]) -> None:
        for event, msg in zip(events, msgs):
            lag.processed(msg)
            await manual.ack(event)

    acks = InOrderAcks(ack, lambda exc: stop_worker_without_commit(app, exc), max_unacked)
    try:
        async for events in batches(manual.events(), max_batch, within_s):
            msgs = [raw_message(e) for e in events]
            with deferred_deliveries() as sent, batched_notices():
                try:
                    if split is not None:
                        await apply_split_batch(msgs, guard, handle, keys_in_flight, split)
                    else:
                        await apply_batch(msgs, guard, handle, keys_in_flight)
                    if finish_batch is not None:
                        await guard.with_store_retries(finish_batch)
                    # Merged (notices.py); the acks wait for them.
                    await guard.with_store_retries(flush_notices)
                except Exception as exc:  # noqa: BLE001 - WorkerMustStop or a bug: never ack past it
                    await stop_worker_without_commit(app, exc)
            await acks.put(list(events), msgs, sent)
    finally:
        acks.close()


class InOrderAcks:
    """Acks applied batches in the order they were applied, each once the events it sent
    are acknowledged (``event_publisher.delivered``), so that a committed offset never
    passes an event not yet in its topic. ``put`` waits while ``max_unacked`` messages
    are already waiting; a failed delivery calls ``on_failure`` (the worker stops without
    committing it) and acks nothing after it."""

    def __init__(self, ack: Callable[[list[Any], list[RawMessage]], Awaitable[None]],
                 on_failure: Callable[[BaseException], Awaitable[None]], max_unacked: int) -> None:
        self._ack = ack
        self._on_failure = on_failure
        self._max = max(1, max_unacked)
        self._queue: deque[tuple[list[Any], list[RawMessage], list[asyncio.Future[Any]]]] = deque()
        self.unacked = 0
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.failed: BaseException | None = None

    async def put(self, events: list[Any], msgs: list[RawMessage],
                  sent: list[asyncio.Future[Any]]) -> None:
        if self.failed is not None:
            raise self.failed
        if not self._queue and all(f.done() for f in sent):
            await self._settle_and_ack(events, msgs, sent)  # nothing to wait for: no hand-off
            return
        while self.unacked and self.unacked + len(msgs) > self._max:
            self._changed.clear()
            await self._changed.wait()
            if self.failed is not None:
                raise self.failed
        self._queue.append((events, msgs, sent))
        self.unacked += len(msgs)
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._drain())

    async def _drain(self) -> None:
        while self._queue:
            events, msgs, sent = self._queue[0]
            await self._settle_and_ack(events, msgs, sent)
            self._queue.popleft()
            self.unacked -= len(msgs)
            self._changed.set()

    async def _settle_and_ack(self, events: list[Any], msgs: list[RawMessage],
                              sent: list[asyncio.Future[Any]]) -> None:
        try:
            await settle(sent)
        except Exception as exc:  # noqa: BLE001 - never ack past an event not delivered
            self.failed = exc
            self._changed.set()
            await self._on_failure(exc)
            raise
        await self._ack(events, msgs)

    async def join(self) -> None:
        """Until every batch put so far is acked (or its delivery failed)."""
        while self._task is not None and not self._task.done():
            await asyncio.shield(self._task)

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
