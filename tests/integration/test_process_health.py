"""/healthz and /readyz of the background processes, on real servers: the ranker and the
fan-out (``python -m services.<role>``), the CDC relay (``python -m services.cdc``), each
ready once it does its job and live but not ready while it cannot reach Kafka; and
``deploy.services`` running two fan-out workers under their own supervisors, pid files
and ports, on a stack folder of the test's own (so nothing clashes with ``make run``'s)."""
from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from deploy import services
from deploy.stack.layout import Layout
from deploy.stack.workers import PORT_STRIDE
from services.shared.settings import Settings, forget_loaded
from tests.support.processes import free_port
from tests.support.waiting import wait_until
from tests.support.worker_env import WorkerEnv, wait_for_workers

pytestmark = pytest.mark.integration


def _answer(url: str) -> tuple[int, dict[str, Any]] | None:
    try:
        r = httpx.get(url, timeout=3)
    except httpx.HTTPError:
        return None
    try:
        return r.status_code, r.json()
    except ValueError:
        return r.status_code, {}


def _until(url: str, status: int, what: str, alive: Callable[[], bool], timeout: float = 90
           ) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        assert alive(), f"the process exited while waiting for {what}"
        got = _answer(url)
        return got[1] if got is not None and got[0] == status else None
    return wait_until(check, timeout=timeout, interval=0.3, message=what)


def _closed_port() -> int:
    """A loopback port nothing listens on (a Kafka that is not there)."""
    return free_port()


def test_the_ranker_is_ready_once_a_member_of_its_group_with_its_stores_open(worker_env: WorkerEnv) -> None:
    port = free_port()
    proc = worker_env.start("services.ranker", "health-ranker", ranker_metrics_port=port)
    base = f"http://127.0.0.1:{port}"
    doc = _until(base + "/readyz", 200, "the ranker ready", lambda: proc.poll() is None)
    checks = doc["checks"]
    assert {"event loop", "consumer thread", "group", "stores"} <= set(checks)
    assert all(c["ok"] for c in checks.values())
    assert checks["group"]["detail"].endswith(")")  # "N partitions of M topics (generation G)"
    assert httpx.get(base + "/healthz", timeout=3).json()["status"] == "ok"
    metrics = httpx.get(base + "/metrics", timeout=3).text
    assert "feed_store_concurrency_limit" in metrics and "python_gc_pause_seconds" in metrics


def test_a_worker_is_live_at_once_and_ready_only_once_a_member_of_its_group(worker_env: WorkerEnv) -> None:
    # (A worker that cannot reach Kafka at all does not stay up to be asked: faust's
    # producer fails to bootstrap and the worker exits, for its supervisor to restart.)
    port = free_port()
    proc = worker_env.start("services.fanout", "health-join", fanout_metrics_port=port)
    base = f"http://127.0.0.1:{port}"
    seen: list[tuple[int, dict[str, Any]]] = []

    def ready() -> bool:
        assert proc.poll() is None, "the fan-out exited"
        got = _answer(base + "/readyz")
        if got is not None:
            seen.append(got)
        return got is not None and got[0] == 200
    wait_until(ready, timeout=90, interval=0.05, message="the fan-out ready")
    # Its server answers before faust has joined the group: not ready, saying why.
    first_code, first = seen[0]
    assert first_code == 503 and first["status"] == "failing", first
    waiting = {name for name, c in first["checks"].items() if not c["ok"]}
    assert waiting & {"group", "stores", "started"}, first
    if "group" in first["checks"]:
        assert first["checks"]["group"]["detail"].startswith("not a member of its group yet")
    last = seen[-1][1]["checks"]
    assert last["group"]["ok"] and "partitions of" in last["group"]["detail"]
    live = _answer(base + "/healthz")
    assert live is not None and live[0] == 200
    assert {"event loop", "consumer thread"} <= set(live[1]["checks"])


def test_the_relay_is_ready_while_it_streams_its_slot_and_reaches_a_broker(source: Settings, relays) -> None:
    port = free_port()
    relay = relays(source, FEED_CDC_METRICS_PORT=str(port))
    base = f"http://127.0.0.1:{port}"
    doc = _until(base + "/readyz", 200, "the relay ready", lambda: relay.proc.poll() is None)
    assert doc["checks"]["slot"]["detail"].startswith("streaming: slot ")
    assert doc["checks"]["kafka"]["detail"].endswith("failing")  # "N brokers connected, 0 failing"
    assert doc["checks"]["relay loop"]["ok"]
    assert "cdc_heartbeats_total" in httpx.get(base + "/metrics", timeout=3).text


def test_a_relay_without_kafka_holds_its_slot_and_is_live_but_not_ready(source: Settings, relays) -> None:
    port = free_port()
    relay = relays(source, FEED_CDC_METRICS_PORT=str(port),
                   FEED_KAFKA_BOOTSTRAP=f"127.0.0.1:{_closed_port()}")
    base = f"http://127.0.0.1:{port}"

    def streaming_without_kafka() -> dict[str, Any] | None:
        assert relay.proc.poll() is None, relay.log()[-2000:]
        got = _answer(base + "/readyz")
        if got is None:
            return None
        checks = got[1].get("checks", {})
        if got[0] == 503 and checks.get("slot", {}).get("ok") and "kafka" in checks:
            return got[1]
        return None
    doc = wait_until(streaming_without_kafka, timeout=60, interval=0.3,
                     message="the relay streaming with no broker")
    assert not doc["checks"]["kafka"]["ok"]
    assert doc["checks"]["kafka"]["detail"].startswith(("no broker connected", "no statistics"))
    live = _answer(base + "/healthz")
    assert live is not None and live[0] == 200


def _port_pair() -> int:
    """A free port p with p + PORT_STRIDE free too (a role's first two workers)."""
    for _ in range(200):
        p = free_port()
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", p + PORT_STRIDE))
            except OSError:
                continue
        return p
    raise RuntimeError("no free pair of ports")


@pytest.fixture
def own_stack_dir(tmp_path: Path, worker_env: WorkerEnv, monkeypatch: pytest.MonkeyPatch) -> Iterator[Layout]:
    """``deploy.services`` pointed at a stack folder of this test's own (pid files, logs)
    and ports no other process uses, on the worker env's keyspace and topics."""
    s = worker_env.settings
    env = {"FEED_STACK_DIR": str(tmp_path / "stack"), "FEED_TOPIC_PREFIX": s.topic_prefix,
           "FEED_CASSANDRA_KEYSPACE": s.cassandra_keyspace, "FEED_PG_DATABASE": s.pg_database,
           "FEED_FANOUT_GROUP_ID": "launcher", "FEED_FANOUT_METRICS_PORT": str(_port_pair()),
           "FEED_RANKER_METRICS_PORT": str(free_port()), "FEED_CDC_METRICS_PORT": str(free_port()),
           "FEED_API_PORT": str(free_port()), "FEED_VISIBILITY_VERIFY_EVERY_S": "0",
           "FEED_KAFKA_SESSION_TIMEOUT_S": "6"}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("FEED_FANOUT_WORKERS", raising=False)
    forget_loaded()
    layout = Layout.from_env(nodes=1)
    try:
        yield layout
    finally:
        services.stop_all(layout)
        forget_loaded()


def test_deploy_services_runs_two_fanout_workers_each_supervised_on_its_own_port(own_stack_dir: Layout) -> None:
    layout = own_stack_dir
    started = services.start(layout, ["fanout"], counts={"fanout": 2, "ranker": 1})
    assert started == ["fanout", "fanout-1"]
    for name in started:
        d = services.daemon(layout, name)
        assert d.alive() and d.log_file.exists()
    base = int(os.environ["FEED_FANOUT_METRICS_PORT"])
    for port in (base, base + PORT_STRIDE):
        code, doc = _answer(f"http://127.0.0.1:{port}/readyz") or (None, {})
        assert code == 200 and doc["checks"]["group"]["ok"], doc

    def both_members() -> list[str] | None:
        lines = services.status_lines(layout, {"fanout": 2, "ranker": 1})
        groups = [line for line in lines if line.strip().startswith("group:")]
        return lines if len(groups) == 2 and all("partitions:" in g for g in groups) else None
    lines = wait_for_workers(both_members, message="status naming both workers' partitions")
    text = "\n".join(lines)
    print(text)  # what `python -m deploy.services status` prints for them
    assert f":{base} " in text and f":{base + PORT_STRIDE} " in text and "ready" in text
    assert services.start(layout, ["fanout"], counts={"fanout": 2, "ranker": 1}) == []  # running
    stopped = services.stop_all(layout)
    assert sorted(stopped) == ["fanout", "fanout-1"]
    assert not any(services.daemon(layout, n).alive() for n in started)
