"""Kafka plumbing shared by the faust workers (fan-out, ranker).

* ``build_faust_app``: a faust app configured for this project (at-least-once, manual
  acks, no web server, internal leader topic disabled: the broker refuses auto-create).
* ``EventPublisher``: an idempotent aiokafka producer (acks=all) for output events and
  dead letters; callers await delivery before acking the source message.
* ``GuardedProcessing``: runs one message through a handler with the project's failure
  rules: transient store errors are retried with backoff and then stop the worker
  without committing; any other error is retried a bounded number of times and the
  message goes to ``<topic>.dlq`` with the error in headers, so the partition keeps
  flowing; a cap on the recent failure share stops the worker (``WorkerMustStop``).
* ``consume_in_batches``: an agent's loop. Messages are taken in batches, split by key
  (one key = one source row: its changes apply in order), keys run concurrently, and
  the batch is acked in offset order once every message is applied or dead-lettered.
* ``ConsumerLag``: consumer lag per topic/partition as a Prometheus gauge.
"""
from __future__ import annotations

import asyncio
import logging
import os
from collections import deque
from dataclasses import dataclass, field
from typing import (Any, AsyncIterable, AsyncIterator, Awaitable, Callable, Generic, Sequence,
                    TypeVar)

import faust
from aiokafka import AIOKafkaProducer
from prometheus_client import Counter, Gauge, Histogram

from .settings import Settings
from .topics import dlq_topic

log = logging.getLogger(__name__)
T = TypeVar("T")

MESSAGES = Counter("feed_consumer_messages_total", "Messages handled", ["topic", "outcome"])
DEAD_LETTERS = Counter("feed_consumer_dlq_total", "Messages sent to a dead-letter topic", ["topic"])
LAG = Gauge("feed_consumer_lag", "Messages behind the partition end", ["topic", "partition"])
BATCH_SIZE = Histogram("feed_consumer_batch_messages", "Messages per applied batch",
                       buckets=(1, 10, 50, 100, 250, 500, 1000, 2000))
# Exit code of a worker stopped on purpose (sysexits EX_TEMPFAIL: a supervisor restarts it).
EXIT_WORKER_STOPPED = 75


@dataclass(frozen=True)
class RawMessage:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Sequence[tuple[str, bytes]] = ()
    timestamp_ms: int | None = None


class WorkerMustStop(RuntimeError):
    """Processing cannot go on safely: stop the worker without committing this offset."""


def build_faust_app(settings: Settings, app_id: str) -> faust.App:
    """A faust app for one worker role. Offsets are acked manually by the agents."""
    return faust.App(
        app_id,
        broker=[f"kafka://{h}" for h in settings.kafka_bootstrap.split(",")],
        web_enabled=False,
        topic_disable_leader=True,
        topic_replication_factor=1 if settings.kafka_bootstrap.count(",") == 0 else 3,
        consumer_auto_offset_reset="earliest",
        broker_session_timeout=settings.kafka_session_timeout_s,
        broker_heartbeat_interval=max(1.0, settings.kafka_session_timeout_s / 4),
        broker_commit_interval=settings.kafka_commit_interval_s,
        stream_wait_empty=False,
        producer_acks=-1,
    )


def raw_topic(app: faust.App, name: str) -> faust.TopicT:
    """A topic read as raw bytes: envelopes are parsed by our code, so a malformed
    message reaches the poison path instead of failing inside faust's deserializer."""
    return app.topic(name, key_type=bytes, value_type=bytes,
                     key_serializer="raw", value_serializer="raw")


def raw_message(event: Any) -> RawMessage:
    """Our view of a faust event (tolerates faust's header forms)."""
    m = event.message
    headers = m.headers or ()
    if isinstance(headers, dict):
        headers = list(headers.items())
    return RawMessage(m.topic, m.partition, m.offset, m.key, m.value,
                      tuple(headers), getattr(m, "timestamp", None) and int(m.timestamp * 1000))


class EventPublisher:
    """Publishes keyed JSON events and dead letters (idempotent producer, acks=all)."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._producer: AIOKafkaProducer | None = None

    async def start(self) -> None:
        self._producer = AIOKafkaProducer(
            bootstrap_servers=self._settings.kafka_bootstrap, acks="all",
            enable_idempotence=True,
            # 5 ms lets a fan-out's events share batches without adding visible latency.
            linger_ms=5)
        await self._producer.start()

    async def stop(self) -> None:
        if self._producer is not None:
            await self._producer.stop()

    async def send(self, topic: str, key: bytes | None, value: bytes | None,
                   headers: Sequence[tuple[str, bytes]] = ()) -> asyncio.Future:
        """Enqueue; the returned future resolves when the broker acknowledged it."""
        assert self._producer is not None, "EventPublisher.start() was not awaited"
        return await self._producer.send(topic, value=value, key=key, headers=list(headers))

    async def send_all(self, messages: Sequence[tuple[str, bytes | None, bytes | None]]) -> None:
        """Send and wait until every message is acknowledged."""
        futures = [await self.send(t, k, v) for t, k, v in messages]
        if futures:
            await asyncio.gather(*futures)


def dead_letter_headers(msg: RawMessage, error: BaseException, attempts: int) -> list[tuple[str, bytes]]:
    """The error and the original position, in the headers of the dead letter."""
    return list(msg.headers) + [
        ("dlq.error.class", f"{type(error).__module__}.{type(error).__qualname__}".encode()),
        ("dlq.error.message", str(error)[:2000].encode("utf-8", "replace")),
        ("dlq.original.topic", msg.topic.encode()),
        ("dlq.original.partition", str(msg.partition).encode()),
        ("dlq.original.offset", str(msg.offset).encode()),
        ("dlq.attempts", str(attempts).encode()),
    ]


@dataclass
class FailureBudget:
    """The share of failures among the last ``window`` messages; too many stops the worker."""

    window: int
    max_share: float
    # Below this many samples, a couple of bad messages is not yet a pattern.
    min_samples: int = 20
    _outcomes: deque[bool] = field(default_factory=deque)

    def record(self, failed: bool) -> None:
        self._outcomes.append(failed)
        while len(self._outcomes) > self.window:
            self._outcomes.popleft()

    @property
    def exhausted(self) -> bool:
        n = len(self._outcomes)
        return n >= min(self.min_samples, self.window) and sum(self._outcomes) / n > self.max_share


def backoff_delays(attempts: int, base_s: float, cap_s: float = 5.0) -> list[float]:
    """Exponential backoff between ``attempts`` tries: base, 2*base, ... capped."""
    return [min(cap_s, base_s * (2 ** i)) for i in range(max(0, attempts - 1))]


Handler = Callable[[RawMessage], Awaitable[None]]


class GuardedProcessing:
    """Applies one message with the project's retry / dead-letter / stop rules."""

    def __init__(self, settings: Settings, publisher: EventPublisher,
                 transient_errors: tuple[type[BaseException], ...],
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self._s = settings
        self._publisher = publisher
        self._transient = transient_errors
        self._sleep = sleep
        self.budget = FailureBudget(settings.consumer_failure_window,
                                    settings.consumer_max_failure_share)

    async def process(self, msg: RawMessage, handle: Handler) -> str:
        """Returns the outcome ("ok" or "dead_letter"); raises ``WorkerMustStop``."""
        poison_attempts = 0
        transient_delays = iter(backoff_delays(self._s.store_retry_attempts, self._s.store_retry_base_s))
        while True:
            try:
                await handle(msg)
                self.budget.record(False)
                MESSAGES.labels(msg.topic, "ok").inc()
                return "ok"
            except self._transient as exc:
                delay = next(transient_delays, None)
                if delay is None:
                    MESSAGES.labels(msg.topic, "stopped").inc()
                    raise WorkerMustStop(f"store still failing after retries: {exc!r}") from exc
                log.warning("transient store error on %s[%d]@%d, retry in %.1fs: %r",
                            msg.topic, msg.partition, msg.offset, delay, exc)
                await self._sleep(delay)
            except Exception as exc:  # noqa: BLE001 - anything else is treated as poison
                poison_attempts += 1
                if poison_attempts < self._s.consumer_max_attempts:
                    continue
                await self._dead_letter(msg, exc, poison_attempts)
                self.budget.record(True)
                if self.budget.exhausted:
                    raise WorkerMustStop(
                        f"failure share over {self._s.consumer_max_failure_share:.0%} "
                        f"of the last {self._s.consumer_failure_window} messages") from exc
                return "dead_letter"

    async def with_store_retries(self, work: Callable[[], Awaitable[None]]) -> None:
        """Run work that belongs to no single message (a batch's shared step): transient
        store errors are retried like a message's, then ``WorkerMustStop``."""
        for delay in [*backoff_delays(self._s.store_retry_attempts, self._s.store_retry_base_s), None]:
            try:
                await work()
                return
            except self._transient as exc:
                if delay is None:
                    raise WorkerMustStop(f"store still failing after retries: {exc!r}") from exc
                log.warning("transient store error in a batch step, retry in %.1fs: %r", delay, exc)
                await self._sleep(delay)

    async def _dead_letter(self, msg: RawMessage, exc: BaseException, attempts: int) -> None:
        log.error("poison message %s[%d]@%d -> %s: %r", msg.topic, msg.partition, msg.offset,
                  dlq_topic(msg.topic), exc)
        future = await self._publisher.send(dlq_topic(msg.topic), msg.key, msg.value,
                                            dead_letter_headers(msg, exc, attempts))
        await future
        DEAD_LETTERS.labels(msg.topic).inc()
        MESSAGES.labels(msg.topic, "dead_letter").inc()


class ConsumerLag:
    """Tracks the last processed offset per partition; ``refresh`` sets the lag gauge."""

    def __init__(self) -> None:
        self._processed: dict[tuple[str, int], int] = {}

    def processed(self, msg: RawMessage) -> None:
        self._processed[(msg.topic, msg.partition)] = msg.offset

    def refresh(self, app: faust.App) -> None:
        consumer = app.consumer
        for tp in consumer.assignment():
            high = consumer.highwater(tp)
            if high is None:
                continue
            done = self._processed.get((tp.topic, tp.partition))
            position = done + 1 if done is not None else (consumer._committed_offset.get(tp) or 0)
            LAG.labels(tp.topic, str(tp.partition)).set(max(0, high - position))


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

    tasks = [asyncio.ensure_future(worker()) for _ in range(min(max(1, keys_in_flight), len(waiting)))]
    if not tasks:
        return
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


async def consume_in_batches(app: faust.App, stream: faust.StreamT, guard: GuardedProcessing,
                             lag: ConsumerLag, handle: Handler, *, max_batch: int, within_s: float,
                             keys_in_flight: int,
                             finish_batch: Callable[[], Awaitable[None]] | None = None) -> None:
    """An agent's loop: batches of messages applied by ``apply_batch`` (order per key,
    keys concurrent), then ``finish_batch`` (work shared by the batch, e.g. one rescore
    per post), then every message of the batch is acked in offset order. Nothing of a
    batch is acked before all of it is done: ``WorkerMustStop``, or any error outside
    the per-message guard, stops the process without committing it (at-least-once; a
    replayed batch is idempotent)."""
    manual = stream.noack()
    async for events in batches(manual.events(), max_batch, within_s):
        msgs = [raw_message(e) for e in events]
        try:
            await apply_batch(msgs, guard, handle, keys_in_flight)
            if finish_batch is not None:
                await guard.with_store_retries(finish_batch)
        except Exception as exc:  # noqa: BLE001 - WorkerMustStop or a bug: never ack past it
            await stop_worker_without_commit(app, exc)
        for event, msg in zip(events, msgs):
            lag.processed(msg)
            await manual.ack(event)


class OpenedOnce(Generic[T]):
    """Resources (sessions, producers) opened once on the worker's loop by whichever
    agent needs them first; agents start concurrently."""

    def __init__(self, opener: Callable[[], Awaitable[T]]) -> None:
        self._opener = opener
        self._value: T | None = None
        self._lock: asyncio.Lock | None = None

    async def get(self) -> T:
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._value is None:
                self._value = await self._opener()
        return self._value

    @property
    def opened(self) -> T | None:
        return self._value
