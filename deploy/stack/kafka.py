"""Apache Kafka 4.3 in KRaft mode: one combined broker+controller, or three.

Started from the jars assembled out of Maven Central with JDK 17. Broker settings follow
what a single small machine needs: few partitions for internal topics (the default 50
makes the first consumer-group join slow), no initial rebalance delay, and, in
three-node mode, RF 3 with min ISR 2 and no unclean leader election.
"""
from __future__ import annotations

import base64
import logging
import shutil
import uuid
from pathlib import Path

from .layout import REPO, Layout
from .process import (Daemon, StatusRow, UpReport, ensure_ports_free, port_open, run_checked, spawn,
                      status_row, stop_many, wait_ready)
from .toolchain import java17, jars

# librdkafka logs every refused connection while a broker starts; readiness polling
# expects those, so its log goes nowhere.
_QUIET = logging.getLogger("stack.kafka.probe")
_QUIET.addHandler(logging.NullHandler())
_QUIET.propagate = False

TEMPLATES = REPO / "deploy" / "stack" / "templates"


def _node_dir(layout: Layout, i: int) -> Path:
    return layout.data("kafka") / f"node{i}"


def daemon(layout: Layout, i: int) -> Daemon:
    return Daemon(name=f"kafka-{i}", pid_file=layout.run / f"kafka-{i}.pid",
                  log_file=layout.logs / f"kafka-{i}.log", marker=str(_node_dir(layout, i)))


def _cluster_id(layout: Layout) -> str:
    path = layout.data("kafka") / "cluster.id"
    if path.is_file():
        return path.read_text().strip()
    while True:  # URL-safe base64 of 16 random bytes, no padding, must not start with '-'
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            break
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(cid)
    return cid


def _properties(layout: Layout, i: int) -> str:
    host = layout.hosts[i - 1]
    voters = ",".join(f"{n}@{h}:{layout.kafka_controller_port}"
                      for n, h in enumerate(layout.hosts, start=1))
    rf = 3 if layout.nodes == 3 else 1
    props = {
        "process.roles": "broker,controller",
        "node.id": str(i),
        "controller.quorum.voters": voters,
        "listeners": f"PLAINTEXT://{host}:{layout.kafka_port},CONTROLLER://{host}:{layout.kafka_controller_port}",
        "advertised.listeners": f"PLAINTEXT://{host}:{layout.kafka_port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(_node_dir(layout, i) / "logs"),
        "num.partitions": "3",
        "default.replication.factor": str(rf),
        "min.insync.replicas": "2" if rf == 3 else "1",
        "unclean.leader.election.enable": "false",
        "offsets.topic.replication.factor": str(rf),
        "transaction.state.log.replication.factor": str(rf),
        "transaction.state.log.min.isr": "2" if rf == 3 else "1",
        "share.coordinator.state.topic.replication.factor": str(rf),
        "share.coordinator.state.topic.min.isr": "2" if rf == 3 else "1",
        # The default 50 partitions make the first group join slow on a small machine.
        "offsets.topic.num.partitions": "3",
        "transaction.state.log.num.partitions": "3",
        "group.initial.rebalance.delay.ms": "0",
        # Topics are contracts, created by migrations; faust creates its own via the admin API.
        "auto.create.topics.enable": "false",
        "num.network.threads": "2",
        "num.io.threads": "4",
        "log.retention.hours": "168",
        "log.segment.bytes": str(256 * 1024 * 1024),
    }
    if rf == 3:
        # A broker that stops heartbeating is fenced, and its partitions led elsewhere,
        # after this (default 9 s, heartbeats every 2 s): a dead or cut-off broker's
        # partitions stall the pipeline that long, and with acks=all every partition it
        # follows in too (docs/reliability.md, broker-kill). Six heartbeats fit in it.
        props["broker.session.timeout.ms"] = "3000"
        props["broker.heartbeat.interval.ms"] = "500"
    return "\n".join(f"{k}={v}" for k, v in props.items()) + "\n"


def _prepare(layout: Layout, i: int, java: str, lib: Path) -> Path:
    node = _node_dir(layout, i)
    marker = node / "formatted"
    if node.exists() and not marker.exists():
        print(f"stack: kafka-{i}: {node} is half-written (an earlier first start did not "
              f"finish); formatting it again", flush=True)
        shutil.rmtree(node)
    node.mkdir(parents=True, exist_ok=True)
    conf = node / "server.properties"
    conf.write_text(_properties(layout, i))
    if not marker.exists():
        run_checked([java, "-cp", f"{lib}/*", f"-Dlog4j2.configurationFile={TEMPLATES / 'log4j2.properties'}",
                     "kafka.tools.StorageTool", "format", "-t", _cluster_id(layout), "-c", str(conf)],
                    f"kafka-{i} storage format", layout.logs / f"kafka-{i}.log")
        marker.write_text("ok\n")
    return conf


def _argv(layout: Layout, java: str, lib: Path, conf: Path) -> list[str]:
    heap = layout.kafka_heap_mb
    return [java, f"-Xms{heap}m", f"-Xmx{heap}m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
            "-Djava.awt.headless=true", f"-Dlog4j2.configurationFile={TEMPLATES / 'log4j2.properties'}",
            f"-Dkafka.logs.dir={layout.logs}", "-cp", f"{lib}/*", "kafka.Kafka", str(conf)]


def _brokers_ready(layout: Layout) -> bool:
    from confluent_kafka.admin import AdminClient

    if not all(port_open(h, layout.kafka_port) for h in layout.hosts):
        return False
    admin = AdminClient({"bootstrap.servers": layout.kafka_bootstrap, "socket.timeout.ms": 2000},
                        logger=_QUIET)
    return len(admin.list_topics(timeout=3).brokers) == layout.nodes


def up(layout: Layout, started: list[Daemon]) -> UpReport:
    java = java17(layout)
    lib = jars(layout, "kafka")
    pending = [i for i in range(1, layout.nodes + 1) if not daemon(layout, i).alive()]
    if not pending:
        return {"state": "already running"}
    ensure_ports_free("kafka", [(layout.hosts[i - 1], p) for i in pending
                                for p in (layout.kafka_port, layout.kafka_controller_port)])
    # All brokers start together: the controller quorum needs a majority to elect.
    for i in pending:
        conf = _prepare(layout, i, java, lib)
        d = daemon(layout, i)
        spawn(d, _argv(layout, java, lib, conf))
        started.append(d)
    waited = 0.0
    for i in pending:
        d = daemon(layout, i)
        waited = max(waited, wait_ready(d, f"kafka-{i}", lambda: _brokers_ready(layout),
                                        timeout=120, log_file=d.log_file))
    return {"state": "started", "seconds": round(waited, 1)}


def down(layout: Layout) -> bool:
    return bool(stop_many([daemon(layout, i) for i in range(1, layout.nodes + 1)], grace=30))


def status(layout: Layout) -> list[StatusRow]:
    return [status_row(daemon(layout, i), f"{layout.hosts[i - 1]}:{layout.kafka_port}")
            for i in range(1, layout.nodes + 1)]
