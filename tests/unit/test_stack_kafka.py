"""The Kafka processes the stack runs: one combined process on one node; on three,
three brokers beside a quorum of three dedicated controllers (deploy/stack/kafka.py)."""
from __future__ import annotations

from typing import Callable

from deploy.stack import kafka
from deploy.stack.layout import Layout

StackLayout = Callable[[int], Layout]


def _props(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line)


def test_one_node_is_one_combined_process(stack_layout: StackLayout) -> None:
    layout = stack_layout(1)
    assert kafka._processes(layout) == [(1, False)]
    props = _props(kafka._properties(layout, 1))
    assert props["process.roles"] == "broker,controller"
    assert props["controller.quorum.voters"] == f"1@127.0.0.1:{layout.kafka_controller_port}"
    assert kafka.broker_ports(layout) == [layout.kafka_port, layout.kafka_controller_port]


def test_three_nodes_split_brokers_from_a_controller_quorum(stack_layout: StackLayout) -> None:
    layout = stack_layout(3)
    names = {kafka.daemon(layout, i, c).name for i, c in kafka._processes(layout)}
    assert names == {"kafka-1", "kafka-2", "kafka-3",
                     "kafka-controller-1", "kafka-controller-2", "kafka-controller-3"}
    brokers = [_props(kafka._properties(layout, i)) for i in (1, 2, 3)]
    controllers = [_props(kafka._properties(layout, i, True)) for i in (1, 2, 3)]
    voters = {int(v.split("@")[0]) for v in brokers[0]["controller.quorum.voters"].split(",")}
    assert voters == {int(c["node.id"]) for c in controllers} == {101, 102, 103}
    assert {int(b["node.id"]) for b in brokers} == {1, 2, 3}
    assert all(b["process.roles"] == "broker" and "CONTROLLER://" not in b["listeners"]
               for b in brokers)
    assert all(c["process.roles"] == "controller" and c["listeners"].startswith("CONTROLLER://")
               for c in controllers)
    # Every process knows the cluster's replication rules (the controller applies the
    # topic defaults when it creates a topic) and the fencing time.
    for props in brokers + controllers:
        assert props["default.replication.factor"] == "3" and props["min.insync.replicas"] == "2"
        assert props["broker.session.timeout.ms"] == "3000"
    # Each process has its own data; a cut broker loses only its own listener.
    dirs = {p["log.dirs"] for p in brokers + controllers}
    assert len(dirs) == 6
    assert kafka.broker_ports(layout) == [layout.kafka_port]
