"""Hedged reads (``FeedStore._rows``): a read a node does not answer in time is sent to
another node, as a separate request, and the first answer wins; writes are never sent
twice, and with one node there is nothing to hedge on."""
from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace
from typing import Any

import pytest

from services.api.copies.store import FeedStore


class FakeResponse:
    """Like the driver's: callbacks added after the answer run at once."""

    _NONE = object()

    def __init__(self, host: str) -> None:
        self._current_host = host
        self._lock = threading.Lock()
        self._callbacks: tuple[Any, Any] | None = None
        self._result: Any = self._NONE

    def add_callbacks(self, ok, err) -> None:
        with self._lock:
            self._callbacks = (ok, err)
            result = self._result
        if result is not self._NONE:
            self._fire(result)

    def resolve(self, result: Any) -> None:
        with self._lock:
            self._result = result
            ready = self._callbacks is not None
        if ready:
            self._fire(result)

    def _fire(self, result: Any) -> None:
        ok, err = self._callbacks  # type: ignore[misc]
        err(result) if isinstance(result, BaseException) else ok(result)

    def clear_callbacks(self) -> None:  # the driver's; cql_async.release calls it
        with self._lock:
            self._callbacks = None


class FakeSession:
    """Answers per node: ``plan[node]`` is (delay_s, rows or an exception), or None to
    never answer. The driver's default plan picks ``hosts[0]``."""

    def __init__(self, hosts: list[str], plan: dict[str, Any]) -> None:
        self.hosts = [SimpleNamespace(name=h, is_up=True) for h in hosts]
        self.plan = plan
        self.sent: list[str] = []
        profiles: dict[str, Any] = {}
        self.cluster = SimpleNamespace(
            profile_manager=SimpleNamespace(profiles=profiles),
            add_execution_profile=lambda name, p: profiles.__setitem__(name, p),
            metadata=SimpleNamespace(all_hosts=lambda: self.hosts))

    def prepare(self, cql: str) -> Any:
        return SimpleNamespace(cql=cql, fetch_size=None)

    def execute_async(self, statement, params, timeout, execution_profile, host=None):
        node = host or self.hosts[0]
        self.sent.append(node.name)
        response = FakeResponse(node)
        answer = self.plan.get(node.name)
        if answer is not None:
            delay, result = answer
            threading.Timer(delay, response.resolve, (result,)).start()
        return response


def _store(session: FakeSession, outcomes: list[str]) -> FeedStore:
    return FeedStore(session, timeout=0.5, max_following=10, hedge_after_s=0.02,  # type: ignore[arg-type]
                     on_hedge=outcomes.append)


def test_a_node_that_does_not_answer_costs_the_hedge_delay_not_a_timeout():
    session, outcomes = FakeSession(["dead", "live"], {"dead": None, "live": (0.0, [(7, "out")])}), []
    store = _store(session, outcomes)
    rows = asyncio.run(store.blocks(1)).blocked
    assert rows == frozenset({7})
    assert session.sent == ["dead", "live"] and outcomes == ["hedge"]


def test_a_prompt_answer_sends_nothing_more():
    session, outcomes = FakeSession(["a", "b"], {"a": (0.0, [(7, "out")]), "b": (0.0, [(8, "out")])}), []
    assert asyncio.run(_store(session, outcomes).blocks(1)).blocked == frozenset({7})
    assert session.sent == ["a"] and outcomes == []


def test_a_fast_failure_is_hedged_at_once_and_the_slow_first_answer_still_counts():
    session = FakeSession(["a", "b"], {"a": (0.0, RuntimeError("connection reset")),
                                       "b": (0.05, [(8, "out")])})
    outcomes: list[str] = []
    assert asyncio.run(_store(session, outcomes).blocks(1)).blocked == frozenset({8})
    assert outcomes == ["hedge"]


def test_when_both_nodes_fail_the_first_error_is_raised():
    session = FakeSession(["a", "b"], {"a": (0.0, RuntimeError("a down")),
                                       "b": (0.0, RuntimeError("b down"))})
    outcomes: list[str] = []
    with pytest.raises(RuntimeError, match="a down"):
        asyncio.run(_store(session, outcomes).blocks(1))
    assert outcomes == ["failed"]


def test_with_one_node_a_slow_read_waits_for_its_timeout():
    session, outcomes = FakeSession(["only"], {"only": None}), []
    with pytest.raises(asyncio.TimeoutError):
        asyncio.run(_store(session, outcomes).blocks(1))
    assert session.sent == ["only"] and outcomes == []


def test_writes_are_never_sent_twice():
    session, outcomes = FakeSession(["dead", "live"], {"dead": None, "live": (0.0, [])}), []
    with pytest.raises(asyncio.TimeoutError):
        asyncio.run(_store(session, outcomes).save_feed_order(1, "latest"))
    assert session.sent == ["dead"]


def test_hedges_are_capped_at_a_share_of_all_reads():
    """When every read is slow (an overloaded node or machine), hedging each one would
    double the load that made them slow: past the budget a slow read just waits."""
    from services.api.copies import store as store_module
    # The slow node answers far later than the hedge delay (0.02 s), so that a loaded
    # machine's timer jitter cannot let a first answer beat its hedge decision.
    session = FakeSession(["slow", "fast"], {"slow": (0.3, [(7, "out")]), "fast": (0.0, [(8, "out")])})
    outcomes: list[str] = []
    store = _store(session, outcomes)
    store._hedge_tokens = 1.0  # the burst spent but one

    async def reads():
        return [(await store.blocks(1)).blocked for _ in range(6)]

    got = asyncio.run(reads())
    hedged = outcomes.count("hedge") + outcomes.count("first")
    assert 1 <= hedged <= 1 + 6 * store_module.HEDGE_SHARE
    assert outcomes.count("over_budget") == 6 - hedged
    assert all(r in (frozenset({7}), frozenset({8})) for r in got)
