"""The faust side of a worker: the app, raw topics, our view of a message, and the
resources its agents open once.

* ``build_faust_app``: a faust app configured for this project (at-least-once, manual
  acks, no web server, internal leader topic disabled: the broker refuses auto-create).
* ``raw_topic`` / ``raw_message``: topics read as bytes and the ``RawMessage`` the rest of
  the pipeline sees (``poison_guard``, ``batch_consumer``).
* ``OpenedOnce``: sessions and producers opened on the worker's loop by the first agent.
* ``run_worker``: a worker process's entry point (``python -m services.<role>``): its
  metrics, ``/healthz`` and ``/readyz`` on one port (services/shared/health.py,
  services/shared/worker/health.py), then faust's worker on uvloop.
* ``install_consumer``: the app's consumer (``WorkerConsumer``) hands each fetched
  message to its stream at once (``eager_handoff``), and its seek to the committed
  offsets also seeks the partitions nobody has committed yet, so that what a rebalance
  dropped of them is fetched again (``committed_seek``).

Several processes of one role share its consumer group (the app id): faust's assignor
spreads the partitions of the topics the role consumes over them, partition numbers
together across topics of the same size (its co-partitioned assignment). Nothing a
worker keeps is local state that another would need: the apps declare no faust tables
(no RocksDB, no changelog topics; ``tests/unit/test_worker_scaling.py`` keeps it so), so
the ``<app id>-data`` folder faust makes in the working directory stays empty and
several workers may share it. Each process names itself to the group by its HTTP
address (``worker_address``): the client id every member shows in the group's
description, and faust's ``canonical_url``, which its assignor keys members' metadata by.
"""
from __future__ import annotations

import asyncio
import logging
import os
import weakref
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Generic, Sequence, TypeVar

import faust
import mode.loop
from faust.transport.drivers import aiokafka as faust_aiokafka
from prometheus_client import REGISTRY

from services.shared import runtime
from services.shared.health import Answer, Health, serve
from services.shared.clients import kafka
from services.shared.clients.preflight import preflight
from services.shared.settings import WorkerProcess, load

from . import health as worker_health
from . import kafka_failover
from .committed_seek import CommittedSeekConsumer
from .eager_handoff import EagerHandOffConsumer, fetcher_hands_off_per_message

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class RawMessage:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Sequence[tuple[str, bytes]] = ()


def build_faust_app(settings: WorkerProcess, app_id: str) -> faust.App:
    """A faust app for one worker role. Offsets are acked manually by the agents.

    Built by ``clients.kafka.faust_app``: its brokers and credentials (SASL, TLS) come
    from the settings (``faust_broker``), like every other Kafka client's. What
    the agents publish goes through their own ``EventPublisher``, built by the same
    factories, not through faust's producer."""
    kafka_failover.install(settings.kafka_failed_broker_hold_s)
    named = {}
    if _worker_address is not None:
        # Each member of the group says which process it is: the group's description
        # shows the client id (deploy/assignment.py), and faust keys its members'
        # metadata by canonical_url, which would otherwise be the same for every worker
        # on a host (http://<hostname>:6066, though faust's web server is off).
        named = {"broker_client_id": f"{app_id}@{_worker_address}",
                 "canonical_url": f"http://{_worker_address}"}
    app = kafka.faust_app(
        settings, app_id,
        **named,
        web_enabled=False,
        topic_disable_leader=True,
        topic_replication_factor=1 if settings.kafka_bootstrap.count(",") == 0 else 3,
        consumer_auto_offset_reset="earliest",
        broker_session_timeout=settings.kafka_session_timeout_s,
        # faust refuses a request timeout under the session timeout.
        broker_request_timeout=max(settings.kafka_request_timeout_s, settings.kafka_session_timeout_s),
        broker_heartbeat_interval=max(1.0, settings.kafka_session_timeout_s / 4),
        producer_request_timeout=settings.kafka_request_timeout_s,
        broker_commit_interval=settings.kafka_commit_interval_s,
        stream_wait_empty=False,
        broker_max_poll_records=settings.kafka_max_poll_records,
        producer_acks=-1,
    )
    install_consumer(app)
    return app


class WorkerConsumer(EagerHandOffConsumer, CommittedSeekConsumer):
    """The workers' consumer: each fetched message handed to its stream without four
    tasks (``eager_handoff``), and a seek to the committed offsets that also seeks the
    partitions nobody has committed yet (``committed_seek``). Each overrides one method
    of faust's aiokafka consumer and calls on to it."""


class _WorkerTransport(faust_aiokafka.Transport):
    Consumer = WorkerConsumer


class _SeekOnlyTransport(faust_aiokafka.Transport):
    Consumer = CommittedSeekConsumer


def install_consumer(app: faust.App) -> bool:
    """Give ``app`` the workers' consumer, before its consumer is first made. Returns
    whether its hand-off is eager: not when the pinned faust's fetcher no longer hands
    off as ``eager_handoff`` expects (the app then gets ``CommittedSeekConsumer`` alone),
    nor when the app's broker is not faust's aiokafka transport (it keeps faust's
    consumer)."""
    if app._consumer is not None:
        raise RuntimeError("install the workers' consumer before the app's consumer is made")
    if not isinstance(app.transport, faust_aiokafka.Transport):
        log.warning("the app's broker is not faust's aiokafka transport: keeping faust's consumer")
        return False
    if not fetcher_hands_off_per_message():
        log.warning("faust's fetcher is not the one eager_handoff knows: keeping faust's hand-off")
        app.transport = _SeekOnlyTransport(app.conf.broker_consumer, app)
        return False
    app.transport = _WorkerTransport(app.conf.broker_consumer, app)
    return True


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
    return RawMessage(m.topic, m.partition, m.offset, m.key, m.value, tuple(headers))


class OpenedOnce(Generic[T]):
    """Resources (sessions, producers) opened once on the worker's loop by whichever
    agent needs them first; agents start concurrently. Every instance of the process
    counts in ``stores_open`` (the worker's readiness)."""

    _instances: "weakref.WeakSet[OpenedOnce[Any]]" = weakref.WeakSet()

    def __init__(self, opener: Callable[[], Awaitable[T]]) -> None:
        self._opener = opener
        self._value: T | None = None
        self._lock: asyncio.Lock | None = None
        OpenedOnce._instances.add(self)

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


def stores_open() -> Answer:
    """Whether every ``OpenedOnce`` of the process has opened (its agents' sessions and
    producers): the stores part of a worker's readiness."""
    instances = list(OpenedOnce._instances)
    waiting = sum(1 for i in instances if i.opened is None)
    if waiting:
        return False, f"{waiting} of {len(instances)} store connections not opened yet"
    return True, f"{len(instances)} opened"


# This process's worker's HTTP address (host:port of its metrics and health), set by
# ``run_worker`` before the app is built; None in a process that only builds apps.
_worker_address: str | None = None


def worker_address(host: str, port: int) -> str:
    """How a worker listening on ``host:port`` names itself (an address others can use:
    a wildcard host is named as this host's loopback)."""
    shown = "127.0.0.1" if host in ("", "0.0.0.0", "::") else host
    return f"{shown}:{port}"


def tune_worker_process(settings: WorkerProcess) -> None:
    """The worker's collector settings (services/shared/runtime.py), once its stores and
    producer are open: what exists by then is made once and lives as long as the process."""
    runtime.tune(REGISTRY, gen0_threshold=settings.worker_gc_gen0_threshold,
                 switch_interval_s=0, freeze=settings.worker_gc_freeze)


W = TypeVar("W", bound=WorkerProcess)


def run_worker(process: type[W], create_app: Callable[[W], faust.App],
               metrics_port: Callable[[W], int],
               stores: Sequence[str] = ("kafka", "cassandra")) -> None:
    """Run one worker role in this process: its settings (``process``: only that role's
    variables are read), logging, a preflight of ``stores`` (a store that refuses our
    credentials or TLS ends the process with one line, status 78), ``/metrics``,
    ``/healthz`` and ``/readyz`` on ``metrics_port(settings)`` (``metrics_host``; 0: a
    free port, logged), then faust's worker, on uvloop, until it stops."""
    global _worker_address
    # uvloop (pinned), before anything asks for a loop: the fan-out's batches are
    # thousands of callbacks, futures and timers a second, and asyncio's own loop in
    # Python was ~12 % of the worker's GIL samples (py-spy, the history drain).
    mode.loop.use("uvloop")
    settings = load(process)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    preflight(settings, stores)
    health = Health(settings.health_stall_s)
    served = serve(health, settings.metrics_host, metrics_port(settings))
    _worker_address = worker_address(settings.metrics_host, served.port)
    app = create_app(settings)
    worker_health.attach(app, health, stores_open)
    log.info("worker %s in group %s, pid %d", _worker_address, app.conf.id, os.getpid())
    faust.Worker(app, loglevel="INFO").execute_from_commandline()
