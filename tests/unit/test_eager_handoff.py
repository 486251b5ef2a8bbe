"""The fetcher's eager hand-off (services/shared/worker/eager_handoff.py): a delivery that
does not wait finishes on the caller's stack without a task; one that waits is raced
against the flow's suspension as faust does, from where it stopped."""
import asyncio
import gc
import warnings
from typing import Any

import pytest
from prometheus_client import REGISTRY

from services.shared.clients import kafka
from services.shared.settings import FanoutProcess, Settings
from services.shared.worker.eager_handoff import EagerHandOffConsumer, start_eagerly
from services.shared.worker.faust_app import build_faust_app, install_consumer


async def _now(value: int) -> int:
    return value * 2


async def _after(fut: "asyncio.Future[int]", seen: list[str]) -> int:
    try:
        got = await fut
        seen.append("resumed")
        return got + 1
    except asyncio.CancelledError:
        seen.append("cancelled")
        raise
    finally:
        seen.append("finally")


async def _fails_at_once() -> None:
    raise ValueError("poison")


async def _fails_later(fut: "asyncio.Future[None]") -> None:
    await fut
    raise KeyError("later")


def test_a_coroutine_that_does_not_wait_finishes_on_the_callers_stack() -> None:
    async def main() -> None:
        tasks = len(asyncio.all_tasks())
        finished, result, rest = start_eagerly(_now(21))
        assert (finished, result, rest) == (True, 42, None)
        assert len(asyncio.all_tasks()) == tasks  # no task was made
    asyncio.run(main())


def test_a_coroutine_that_waits_goes_on_from_where_it_stopped() -> None:
    async def main() -> None:
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        seen: list[str] = []
        finished, _, rest = start_eagerly(_after(fut, seen))
        assert not finished and rest is not None and seen == []
        task = asyncio.ensure_future(rest)
        await asyncio.sleep(0)
        assert not task.done()  # it waits on the future it stopped at
        fut.set_result(6)
        assert await task == 7
        assert seen == ["resumed", "finally"]

        # Awaited directly instead of as a task: the same.
        fut2: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        _, _, rest2 = start_eagerly(_after(fut2, seen := []))
        asyncio.get_running_loop().call_soon(fut2.set_result, 1)
        assert rest2 is not None and await rest2 == 2
    asyncio.run(main())


def test_a_cancelled_rest_cancels_the_coroutine_and_errors_raise_where_they_happen() -> None:
    async def main() -> None:
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        seen: list[str] = []
        _, _, rest = start_eagerly(_after(fut, seen))
        task = asyncio.ensure_future(rest)  # type: ignore[arg-type]
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert seen == ["cancelled", "finally"]

        with pytest.raises(ValueError, match="poison"):
            start_eagerly(_fails_at_once())
        later: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        _, _, rest = start_eagerly(_fails_later(later))
        later.set_result(None)
        with pytest.raises(KeyError):
            await rest  # type: ignore[misc]
    asyncio.run(main())


def _handoffs(how: str) -> float:
    return REGISTRY.get_sample_value("feed_worker_message_handoffs_total", {"how": how}) or 0.0


def _consumer() -> Any:
    app = kafka.faust_app(Settings(kafka_bootstrap="127.0.0.1:1"), "eager-handoff")
    assert install_consumer(app)
    return app.consumer


def test_the_fetchers_hand_off_returns_at_once_for_a_delivery_that_does_not_wait() -> None:
    async def main() -> None:
        consumer = _consumer()
        assert isinstance(consumer, EagerHandOffConsumer)
        tasks = len(asyncio.all_tasks())
        at_once = _handoffs("at_once")
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)  # the unused flow wait is closed
            results = await consumer.wait_first(_now(5), consumer.suspend_flow.wait())
            gc.collect()
        assert results.results == [10] and not results.stopped
        assert len(asyncio.all_tasks()) == tasks
        assert _handoffs("at_once") == at_once + 1
    asyncio.run(main())


def test_a_delivery_that_waits_is_raced_against_the_flows_suspension_as_faust_does() -> None:
    async def main() -> None:
        consumer = _consumer()
        loop = asyncio.get_running_loop()
        # The delivery finishes first: its result, as faust's wait_first gives it.
        fut: asyncio.Future[int] = loop.create_future()
        loop.call_later(0.01, fut.set_result, 1)
        raced = _handoffs("raced")
        results = await consumer.wait_first(_after(fut, []), consumer.suspend_flow.wait())
        assert results.results == [2] and not results.stopped
        assert _handoffs("raced") == raced + 1
        # A rebalance suspends the flow first: the delivery is cancelled, as faust does.
        seen: list[str] = []
        blocked: asyncio.Future[int] = loop.create_future()
        loop.call_later(0.01, consumer.suspend_flow.set)
        suspension = consumer.suspend_flow.wait()
        results = await consumer.wait_first(_after(blocked, seen), suspension)
        assert results.done == [suspension] and not results.stopped
        await asyncio.sleep(0)
        assert seen == ["cancelled", "finally"]
        # While the flow is suspended, faust's own path runs: the suspension wins.
        suspension = consumer.suspend_flow.wait()
        results = await consumer.wait_first(_after(loop.create_future(), []), suspension)
        assert results.done == [suspension]
        consumer.suspend_flow.clear()
    asyncio.run(main())


def test_every_worker_app_gets_the_eager_hand_off() -> None:
    async def main() -> None:
        app = build_faust_app(FanoutProcess(kafka_bootstrap="127.0.0.1:1"), "eager-handoff-worker")
        assert isinstance(app.consumer, EagerHandOffConsumer)
    asyncio.run(main())
