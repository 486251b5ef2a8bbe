"""Brokers that failed are asked last (services/shared/worker/kafka_failover.py), against the
pinned aiokafka's client with a fake cluster (no broker needed)."""
from __future__ import annotations

import asyncio
from types import SimpleNamespace

import aiokafka.client as aioclient
from aiokafka.conn import CloseReason

from services.shared.worker import kafka_failover
from services.shared.worker.kafka_failover import SuspectBrokers


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_failed_brokers_go_last_and_come_back_after_the_hold_or_an_answer():
    clock = Clock()
    s = SuspectBrokers(clock, hold_s=10)
    s.failed(3)
    s.failed("bootstrap")  # never suspected: it is the way in
    for _ in range(50):
        nodes = [1, 2, 3, "bootstrap"]
        s.order(nodes)
        assert nodes[-1] == 3
        assert s.choose([1, 2, 3]) in (1, 2)
    assert s.choose([3]) == 3  # everyone suspect: ask anyway
    clock.t += 11
    assert not s.suspect(3)
    s.failed(2)
    s.answered(2)
    assert not s.suspect(2)


def _client_with(brokers):
    """An AIOKafkaClient whose cluster metadata lists ``brokers`` (id, host, port)."""
    client = aioclient.AIOKafkaClient(bootstrap_servers="127.0.0.1:1")
    client.cluster.brokers = lambda: [SimpleNamespace(nodeId=i, host=h, port=p) for i, h, p in brokers]
    return client


def test_the_installed_client_avoids_a_broker_whose_connection_timed_out():
    kafka_failover.install()
    kafka_failover.install()  # idempotent
    assert isinstance(aioclient.random, kafka_failover._Random)

    async def main() -> None:
        client = _client_with([(1, "127.0.0.1", 9092), (2, "127.0.0.2", 9092), (3, "127.0.0.3", 9092)])
        conn = SimpleNamespace(host="127.0.0.3", port=9092)
        client._on_connection_closed(conn, CloseReason.CONNECTION_TIMEOUT)
        assert kafka_failover.SUSPECTS.suspect(3)
        assert {client.get_random_node() for _ in range(60)} == {1, 2}

        kafka_failover.SUSPECTS.answered(3)
        # A broker the client cannot connect to (here: not in its metadata, which the
        # real _get_conn reports the same way as a refused connection, None).
        client.cluster.broker_metadata = lambda node_id: None
        assert await client._get_conn(2) is None
        assert kafka_failover.SUSPECTS.suspect(2)
        kafka_failover.SUSPECTS.answered(2)
        await client.close()

    asyncio.run(main())


def test_connections_to_a_suspect_broker_the_cluster_dropped_are_closed():
    closed: list[tuple[int, object]] = []

    class Conn:
        def __init__(self, node: int) -> None:
            self.node = node

        def close(self, reason=None):
            closed.append((self.node, reason))

    leads = {1: {"t-0"}, 2: {"t-1"}, 5: set()}
    client = SimpleNamespace(
        cluster=SimpleNamespace(brokers=lambda: [SimpleNamespace(nodeId=n) for n in (1, 2, 5)],
                                partitions_for_broker=lambda n: leads.get(n) or None),
        _conns={(1, 0): Conn(1), (3, 0): Conn(3), (3, 1): Conn(3), (4, 0): Conn(4),
                (2, 0): Conn(2), (5, 1): Conn(5), ("bootstrap", 0): Conn(0)})
    for n in (2, 3, 5):
        kafka_failover.SUSPECTS.failed(n)
    try:
        kafka_failover._drop_fenced(client)
    finally:
        for n in (2, 3, 5):
            kafka_failover.SUSPECTS.answered(n)
    # Broker 3 failed and is gone from the metadata: both its connections (data and
    # coordination) close; broker 5 failed and is listed but leads nothing: closed too.
    # Broker 2 failed but still leads a partition; broker 4 is gone but never failed here.
    assert sorted(n for n, _ in closed) == [3, 3, 5]
    assert {r for _, r in closed} == {CloseReason.CONNECTION_BROKEN}


def test_metadata_is_refreshed_while_a_suspect_broker_is_listed():
    refreshed: list[float] = []
    brokers = [SimpleNamespace(nodeId=1), SimpleNamespace(nodeId=3)]

    async def main() -> None:
        loop = asyncio.get_running_loop()

        async def force() -> None:
            refreshed.append(loop.time())
            if len(refreshed) == 2:
                brokers.pop()  # the controller fenced broker 3: the next look ends the watch

        client = SimpleNamespace(cluster=SimpleNamespace(brokers=lambda: list(brokers)),
                                 _sync_task=object(), force_metadata_update=force)
        kafka_failover.SUSPECTS.failed(3)
        old = kafka_failover.REFRESH_EVERY_S
        kafka_failover.REFRESH_EVERY_S = 0.01
        try:
            kafka_failover._watch(client)
            kafka_failover._watch(client)  # one watch per client
            await asyncio.wait_for(client._feed_failover_watch, 2)
        finally:
            kafka_failover.REFRESH_EVERY_S = old
            kafka_failover.SUSPECTS.answered(3)

    asyncio.run(main())
    assert len(refreshed) == 2
