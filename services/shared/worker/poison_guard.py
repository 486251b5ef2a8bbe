"""``GuardedProcessing``: one message through a handler with the project's failure rules.

Transient store errors (and Kafka errors that say "try again": an event the handler
sent found no reachable leader) are retried with backoff, each retry spending the
worker's retry budget (store_pressure.py ``RetryGate``: it waits while the budget is
empty), and then stop the worker without committing; any other error is retried a
bounded number of times and the message goes to ``<topic>.dlq`` with the error in
headers, so the partition keeps flowing; a cap on the recent failure share stops the
worker (``WorkerMustStop``).
"""
from __future__ import annotations

import asyncio
import logging
from collections import deque
from dataclasses import dataclass, field
from typing import Awaitable, Callable, Sequence

from prometheus_client import Counter

from services.shared.contracts.topics import dlq_topic
from services.shared.settings import WorkerProcess
from services.shared.stores.cql_async import StoreRetry, backoff_delays
from services.shared.stores.store_pressure import RetryGate

from .event_publisher import EventPublisher, retriable_kafka_error
from .faust_app import RawMessage

log = logging.getLogger(__name__)

__all__ = ["GuardedProcessing", "WorkerMustStop", "FailureBudget", "backoff_delays",
           "dead_letter_headers"]

MESSAGES = Counter("feed_consumer_messages_total", "Messages handled", ["topic", "outcome"])
DEAD_LETTERS = Counter("feed_consumer_dlq_total", "Messages sent to a dead-letter topic", ["topic"])

Handler = Callable[[RawMessage], Awaitable[None]]
OUTCOMES = ("ok", "dead_letter", "stopped")


def expect_topic(topic: str) -> None:
    """Export the topic's counters at 0 before its first message: a rate over a series
    that does not exist yet is no data, not 0 (a dashboard panel or an alert on dead
    letters would stay empty until the first one)."""
    for outcome in OUTCOMES:
        MESSAGES.labels(topic, outcome)
    DEAD_LETTERS.labels(topic)


class WorkerMustStop(RuntimeError):
    """Processing cannot go on safely: stop the worker without committing this offset."""


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


class GuardedProcessing:
    """Applies one message with the project's retry / dead-letter / stop rules."""

    def __init__(self, settings: WorkerProcess, publisher: EventPublisher,
                 transient_errors: tuple[type[BaseException], ...],
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                 retries: RetryGate | None = None) -> None:
        """``retries``: the worker's retry budget (``StorePressure.retries``); each retry
        of a transient error waits for a token of it after its backoff, each applied
        message earns. None: retries are bounded by the backoff alone (tests)."""
        self._s = settings
        self._publisher = publisher
        self._transient = transient_errors
        self._sleep = sleep
        self._retries = retries
        self._batch_retry = StoreRetry(settings.store_retry_attempts, settings.store_retry_base_s,
                                       sleep, self._is_transient, retries)
        self.budget = FailureBudget(settings.consumer_failure_window,
                                    settings.consumer_max_failure_share)

    async def process(self, msg: RawMessage, handle: Handler) -> str:
        """Returns the outcome ("ok" or "dead_letter"); raises ``WorkerMustStop``."""
        poison_attempts = 0
        transient_delays = iter(backoff_delays(self._s.store_retry_attempts, self._s.store_retry_base_s))
        while True:
            try:
                await handle(msg)
                if self._retries is not None:
                    self._retries.succeeded()
                self.budget.record(False)
                MESSAGES.labels(msg.topic, "ok").inc()
                return "ok"
            except Exception as exc:  # noqa: BLE001 - transient, or else treated as poison
                if not self._is_transient(exc):
                    poison = exc
                else:
                    delay = next(transient_delays, None)
                    if delay is None:
                        MESSAGES.labels(msg.topic, "stopped").inc()
                        raise WorkerMustStop(f"store still failing after retries: {exc!r}") from exc
                    log.warning("transient store error on %s[%d]@%d, retry in %.1fs: %r",
                                msg.topic, msg.partition, msg.offset, delay, exc)
                    await self._sleep(delay)
                    if self._retries is not None:
                        await self._retries.before_retry()  # an empty budget waits: nothing is dropped
                    continue
            poison_attempts += 1
            if poison_attempts < self._s.consumer_max_attempts:
                continue
            await self._dead_letter(msg, poison, poison_attempts)
            self.budget.record(True)
            if self.budget.exhausted:
                raise WorkerMustStop(
                    f"failure share over {self._s.consumer_max_failure_share:.0%} "
                    f"of the last {self._s.consumer_failure_window} messages") from poison
            return "dead_letter"

    def applied_together(self, msgs: Sequence[RawMessage]) -> None:
        """Messages a batch step applied together (batch_consumer.py ``Together``): each
        counts as one ``process`` that succeeded at once (its outcome, the failure
        window, the retry budget's earnings)."""
        for msg in msgs:
            if self._retries is not None:
                self._retries.succeeded()
            self.budget.record(False)
            MESSAGES.labels(msg.topic, "ok").inc()

    def _is_transient(self, exc: BaseException) -> bool:
        """A store that did not answer, or a Kafka cluster that did not (an event the
        handler sent had no reachable leader): the message is fine, retry it; only what
        is left is poison and may be dead-lettered."""
        return isinstance(exc, self._transient) or retriable_kafka_error(exc)

    async def with_store_retries(self, work: Callable[[], Awaitable[None]]) -> None:
        """Run work that belongs to no single message (a batch's shared step, its merged
        notices): transient store errors, and a Kafka cluster that did not answer, are
        retried like a message's, then ``WorkerMustStop``."""
        try:
            await self._batch_retry(work, lambda exc: log.warning(
                "transient store error in a batch step: %r", exc))
        except Exception as exc:
            if not self._is_transient(exc):
                raise
            raise WorkerMustStop(f"store still failing after retries: {exc!r}") from exc

    async def _dead_letter(self, msg: RawMessage, exc: BaseException, attempts: int) -> None:
        log.error("poison message %s[%d]@%d -> %s: %r", msg.topic, msg.partition, msg.offset,
                  dlq_topic(msg.topic), exc)
        future = await self._publisher.send(dlq_topic(msg.topic), msg.key, msg.value,
                                            dead_letter_headers(msg, exc, attempts))
        await future
        DEAD_LETTERS.labels(msg.topic).inc()
        MESSAGES.labels(msg.topic, "dead_letter").inc()
