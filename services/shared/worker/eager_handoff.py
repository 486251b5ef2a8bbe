"""faust's consumer hands each fetched message to its stream without a task per message.

faust's fetcher (``Consumer._drain_messages``, faust-streaming 0.15) delivers every
message as ``wait_first(callback(message), suspend_flow.wait())``: the delivery races a
rebalance's flow suspension. ``mode``'s ``wait_first`` makes a task of each argument plus
two more (the service's stopped and crashed events), waits for the first, and cancels
the other three: four tasks a message. Measured on uvloop: 34-36 µs a hand-off, against
2.9-3.9 µs eager (``bench/results/2026-12-07-eager-handoff/``), where the fan-out's whole
per-post work is a few hundred µs. In the month of history's drain the fan-out's CPU
fell 11-19 % (24-34 % with one follower an author, nearly no rows).

A delivery almost never waits: it decodes the message and puts it on the stream's queue,
which waits only when the queue is full. ``EagerHandOffConsumer`` therefore starts the
delivery at once (``start_eagerly``) and returns when it finishes without waiting, which
is the race's outcome too (the delivery won; nothing else had a chance to run). A
delivery that does wait (a full queue, a flow suspended meanwhile) is raced exactly as
faust does, from where it stopped. When the flow is already suspended, or the consumer
is stopping, faust's own path runs. ``fetcher_hands_off_per_message`` checks the pinned
faust: its fetcher must still hand off this way, or the workers keep faust's hand-off
(``faust_app.install_consumer`` composes the workers' consumer).

``start_eagerly`` is Python 3.12's eager task start (``asyncio.eager_task_factory``) for
one coroutine, on the 3.11 the workers run.
"""
from __future__ import annotations

import inspect
from collections.abc import Coroutine
from typing import Any, Awaitable, Generator, Generic, TypeVar, cast

from faust.transport import consumer as faust_consumer
from faust.transport.drivers import aiokafka as faust_aiokafka
from mode.services import WaitArgT, WaitResults
from mode.utils.times import Seconds
from prometheus_client import Counter

T = TypeVar("T")

HANDOFFS = Counter("feed_worker_message_handoffs",
                   "Fetched messages handed to their stream: at_once (the delivery did not "
                   "wait) or raced (it waited: a full stream queue, or a flow suspended)",
                   ["how"])
_AT_ONCE = HANDOFFS.labels("at_once")
_RACED = HANDOFFS.labels("raced")


class _Resumed(Generic[T]):
    """The rest of a coroutine that ``start_eagerly`` began and that stopped at an
    awaitable: awaiting this (or a task made of it) first hands that awaitable to the
    event loop, then forwards every send and throw to the coroutine, as ``await`` does."""

    __slots__ = ("_coro", "_pending")

    def __init__(self, coro: Coroutine[Any, Any, T], pending: Any) -> None:
        self._coro = coro
        self._pending = pending

    def __await__(self) -> Generator[Any, Any, T]:
        coro, pending = self._coro, self._pending
        while True:
            try:
                sent = yield pending
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # noqa: BLE001 - thrown in by the task (a cancel): forwarded
                try:
                    pending = coro.throw(exc)
                except StopIteration as done:
                    return done.value  # type: ignore[no-any-return]
            else:
                try:
                    pending = coro.send(sent)
                except StopIteration as done:
                    return done.value  # type: ignore[no-any-return]


def start_eagerly(coro: Coroutine[Any, Any, T]) -> tuple[bool, T | None, Awaitable[T] | None]:
    """Run ``coro`` now, on the caller's stack, until it first waits: ``(True, result,
    None)`` if it finished without waiting, else ``(False, None, rest)`` where ``rest``
    continues it (await it, or make a task of it). Its errors raise here or from ``rest``."""
    try:
        pending = coro.send(None)
    except StopIteration as done:
        return True, done.value, None
    return False, None, _Resumed(coro, pending)


class EagerHandOffConsumer(faust_aiokafka.Consumer):
    """faust's aiokafka consumer whose fetcher starts each delivery at once (module
    docstring). Only the fetcher's hand-off, ``wait_first(delivery, suspend_flow.wait())``,
    is changed: every other wait of the consumer takes one argument."""

    async def wait_first(self, *coros: WaitArgT,
                         timeout: Seconds = None) -> WaitResults:  # type: ignore[assignment]  # mode's own default
        if len(coros) == 2 and timeout is None:
            delivery, suspended = coros
            if (isinstance(delivery, Coroutine) and isinstance(suspended, Coroutine)
                    and not (self.suspend_flow.is_set() or self._stopped.is_set()
                             or self._crashed.is_set())):
                finished, result, rest = start_eagerly(delivery)
                if finished:
                    suspended.close()  # never awaited: the delivery won before it began
                    _AT_ONCE.inc()
                    return WaitResults([delivery], [result], False)
                assert rest is not None
                coros = (cast(WaitArgT, rest), suspended)
            _RACED.inc()
        return await super().wait_first(*coros, timeout=timeout)


def fetcher_hands_off_per_message() -> bool:
    """Whether the pinned faust's fetcher still delivers each message through
    ``wait_first(callback(message), self.suspend_flow.wait())``."""
    try:
        source = inspect.getsource(faust_consumer.Consumer._drain_messages)
    except (OSError, TypeError):
        return False
    return "self.wait_first(" in source and "callback(message), self.suspend_flow.wait()" in source
