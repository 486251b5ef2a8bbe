"""Brokers that failed are asked last (services/common/kafka_failover.py), against the
pinned aiokafka's client with a fake cluster (no broker needed)."""
from __future__ import annotations

import asyncio
from types import SimpleNamespace

import aiokafka.client as aioclient
from aiokafka.conn import CloseReason

from services.common import kafka_failover
from services.common.kafka_failover import SuspectBrokers


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
