"""The background processes' /healthz and /readyz (services/shared/health.py), their
workers' group membership (services/shared/worker/health.py) and the relay's checks
(services/cdc/health.py): the logic with a fake clock, and the server over real HTTP
with a real event loop that is made to stall."""
from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
from faust.types import TP
from prometheus_client import CollectorRegistry, Counter

from services.cdc.health import (BACKING_OFF, CONNECTING, SNAPSHOT, STREAMING, RelayStatus,
                                 kafka_check, relay_health)
from services.shared.clients import kafka
from services.shared.health import Health, Pulse, serve
from services.shared.settings import Settings
from services.shared.worker.health import GroupMembership, attach


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_pulse_fails_once_silent_past_the_limit_and_a_declared_pause_stretches_it() -> None:
    clock = Clock()
    pulse = Pulse(clock)
    clock.now += 29
    assert pulse.check(30)[0]
    clock.now += 2
    ok, detail = pulse.check(30)
    assert not ok and "silent for 31.0 s" in detail
    pulse.beat()
    with pulse.pausing(300, "flushing the snapshot to Kafka"):
        clock.now += 200
        ok, detail = pulse.check(30)
        assert ok and "flushing" in detail
        clock.now += 101
        ok, detail = pulse.check(30)
        assert not ok and "while flushing the snapshot to Kafka" in detail
    assert pulse.check(30)[0]  # the pause's end is a beat


def test_readiness_needs_its_checks_and_says_what_each_saw() -> None:
    health = Health(30, clock=Clock())
    assert health.liveness() == {"process": (True, "serving (nothing to watch yet)")}
    assert health.readiness()["started"] == (False, "starting")
    health.readiness_check("group", lambda: (True, "6 partitions of 9 topics"))
    health.readiness_check("stores", lambda: (False, "1 of 1 store connections not opened yet"))

    def broken() -> tuple[bool, str]:
        raise RuntimeError("boom")
    health.readiness_check("other", broken)
    answers = health.readiness()
    assert answers["group"] == (True, "6 partitions of 9 topics")
    assert not answers["stores"][0]
    assert answers["other"] == (False, "check failed: RuntimeError: boom")


def test_group_membership_is_ready_once_assigned_and_not_while_a_rebalance_drags() -> None:
    clock = Clock()
    group = GroupMembership(clock)
    ok, detail = group.check(30)
    assert not ok and detail == "not a member of its group yet"
    group.revoked()
    clock.now += 5
    assert group.check(30) == (False, "not a member of its group yet (joining for 5 s)")
    group.assigned([("feed.public.posts", 0), ("feed.public.posts", 3), ("feed.public.follows", 0)], 4)
    assert group.check(30) == (True, "3 partitions of 2 topics (generation 4)")
    group.revoked()  # another worker joins
    clock.now += 10
    ok, detail = group.check(30)
    assert ok and detail.startswith("rebalancing for 10 s")
    clock.now += 25
    assert group.check(30) == (False, "rebalancing for 35 s (limit 30 s)")
    group.assigned([], 5)  # more members than partitions: a member all the same
    ok, detail = group.check(30)
    assert ok and detail.startswith("no partitions")


def test_a_worker_assigned_before_its_first_task_ran_watches_its_event_loop_when_ready() -> None:
    # On a slow start faust can deliver the group's assignment before the app's tasks
    # have first run; readiness must then still say the worker's loop is watched.
    app = kafka.faust_app(Settings(kafka_bootstrap="127.0.0.1:1"), "health-order")
    health = Health(30)
    attach(app, health, stores_open=lambda: (True, "open"))

    async def assign() -> None:
        await app.on_partitions_assigned.send({TP("feed.public.posts", 0)})
    asyncio.run(assign())
    answers = health.readiness()
    assert {"event loop", "group", "stores"} <= set(answers)
    assert answers["group"] == (True, "1 partitions of 1 topics (generation 0)")


def test_the_relay_is_ready_while_it_holds_its_slot_and_sees_a_broker() -> None:
    status = RelayStatus()
    assert status.slot_check() == (False, "starting")
    for phase, holds in ((CONNECTING, False), (SNAPSHOT, True), (STREAMING, True), (BACKING_OFF, False)):
        status.enter(phase, "slot feed_cdc_feed")
        assert status.slot_check() == (holds, f"{phase}: slot feed_cdc_feed")
    clock = Clock()
    assert kafka_check(30, clock, lambda: None) == (False, "no statistics from the producer yet")
    assert kafka_check(30, clock, lambda: (clock.now - 5, {"up": 0, "down": 3})) == (
        False, "no broker connected (3 failing)")
    assert kafka_check(30, clock, lambda: (clock.now - 40, {"up": 3, "down": 0}))[0] is False
    assert kafka_check(30, clock, lambda: (clock.now - 5, {"up": 2, "down": 1})) == (
        True, "2 brokers connected, 1 failing")
    health = relay_health(status, 30)
    assert set(health.readiness()) == {"relay loop", "slot", "kafka"}


@pytest.fixture
def loop_in_thread() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.close()


def _get(url: str) -> httpx.Response:
    return httpx.get(url, timeout=5)


def test_healthz_fails_while_a_watched_loop_is_stalled_and_recovers(loop_in_thread) -> None:
    registry = CollectorRegistry()
    Counter("feed_test_things", "things", registry=registry).inc()
    health = Health(stall_s=0.5)
    health.watch_loop("event loop", loop_in_thread)
    health.readiness_check("group", lambda: (True, "2 partitions of 9 topics"))
    served = serve(health, "127.0.0.1", 0, registry)
    base = f"http://127.0.0.1:{served.port}"
    try:
        deadline = time.monotonic() + 5
        while _get(base + "/healthz").json()["checks"]["event loop"]["detail"].startswith("answering (0"):
            assert time.monotonic() < deadline, "the watchdog never probed the loop"
            time.sleep(0.05)
        ok = _get(base + "/healthz")
        assert ok.status_code == 200 and ok.json()["status"] == "ok"
        assert _get(base + "/readyz").status_code == 200
        metrics = _get(base + "/metrics")
        assert metrics.status_code == 200 and "feed_test_things_total 1.0" in metrics.text

        loop_in_thread.call_soon_threadsafe(time.sleep, 2.5)  # the loop stops turning
        deadline = time.monotonic() + 5
        while (r := _get(base + "/healthz")).status_code == 200:
            assert time.monotonic() < deadline, "a stalled loop still answered healthy"
            time.sleep(0.1)
        assert r.status_code == 503
        doc = r.json()
        assert doc["status"] == "failing" and not doc["checks"]["event loop"]["ok"]
        assert "has not run a callback" in doc["checks"]["event loop"]["detail"]
        assert _get(base + "/readyz").status_code == 503  # not ready while not live
        assert _get(base + "/metrics").status_code == 200  # the server itself still answers

        deadline = time.monotonic() + 6
        while _get(base + "/healthz").status_code != 200:
            assert time.monotonic() < deadline, "the loop turned again but stayed unhealthy"
            time.sleep(0.1)
    finally:
        served.close()


def test_a_closed_loop_is_not_alive() -> None:
    loop = asyncio.new_event_loop()
    health = Health(stall_s=30)
    health.watch_loop("consumer thread", loop)
    loop.close()
    health.probe()
    assert health.liveness()["consumer thread"] == (False, "its event loop is closed")
