"""Apache Kafka 4.3 in KRaft mode: one combined broker+controller, or, in three-node mode,
three brokers beside a quorum of three dedicated controllers.

Started from the jars assembled out of Maven Central with JDK 17. Broker settings follow
what a single small machine needs: few partitions for internal topics (the default 50
makes the first consumer-group join slow), no initial rebalance delay, and, in
three-node mode, RF 3 with min ISR 2 and no unclean leader election.

Three-node mode runs KRaft as Kafka advises for production (combined mode "is not
recommended for critical deployment environments"): controller ``i`` (node id 100+i,
``kafka-controller-i``) listens on node ``i``'s address beside broker ``i``
(``kafka-i``), each its own process and cgroup. A broker that dies or is cut off is then
only a broker: in combined mode, when it was also the active controller, the other two
first had to notice (2 s without its fetches), elect, and only then start the 3 s to
fencing it, and broker-cut showed posts 7.1 s late (p95) against 0.8-5 s otherwise
(docs/reliability.md).

Every process carries the Prometheus JMX exporter's agent, serving its few metrics
(``deploy/prometheus/jmx-kafka.yml``) on its node's address: brokers (and the one-node
combined process) on ``FEED_KAFKA_EXPORTER_PORT``, controllers on
``FEED_KAFKA_CONTROLLER_EXPORTER_PORT`` (exporters.py).
"""
from __future__ import annotations

import base64
import os
import shutil
import uuid
from pathlib import Path

from services.shared.clients import kafka as kafka_clients

from . import exporters, security
from .layout import REPO, Layout
from .process import (Daemon, StackError, StatusRow, UpReport, ensure_ports_free, port_open, run_checked,
                      spawn, status_row, stop_many, wait_ready)
from .toolchain import java17, jars

# librdkafka logs every refused connection while a broker starts; readiness polling
# expects those, so its log goes nowhere.
_QUIET = kafka_clients.quiet_logger("stack.kafka.probe")

TEMPLATES = REPO / "deploy" / "stack" / "templates"


# Controller ``i``'s node id in three-node mode (brokers are 1..3).
CONTROLLER_ID_BASE = 100
CONTROLLER_HEAP_MB = 256


def split(layout: Layout) -> bool:
    """Dedicated controllers (three-node mode), or one combined process (one node)."""
    return layout.nodes > 1


def _node_dir(layout: Layout, i: int, controller: bool = False) -> Path:
    if not split(layout):
        return layout.data("kafka") / f"node{i}"
    # Not node{i}: three-node data formatted before the controllers moved out holds a
    # combined quorum, which these processes cannot join.
    return layout.data("kafka") / f"{'controller' if controller else 'broker'}{i}"


def _name(i: int, controller: bool = False) -> str:
    return f"kafka-controller-{i}" if controller else f"kafka-{i}"


def daemon(layout: Layout, i: int, controller: bool = False) -> Daemon:
    """Broker ``i`` (the combined process in one-node mode), or controller ``i``."""
    name = _name(i, controller)
    return Daemon(name=name, pid_file=layout.run / f"{name}.pid",
                  log_file=layout.logs / f"{name}.log", marker=str(_node_dir(layout, i, controller)))


def _processes(layout: Layout) -> list[tuple[int, bool]]:
    """(node, is a controller) of every Kafka process of the layout."""
    brokers = [(i, False) for i in range(1, layout.nodes + 1)]
    return brokers + ([(i, True) for i in range(1, layout.nodes + 1)] if split(layout) else [])


def broker_ports(layout: Layout) -> list[int]:
    """The ports a broker's process listens on (a cut broker loses these)."""
    if split(layout):
        return [layout.kafka_port]
    return [layout.kafka_port, layout.kafka_controller_port]


def _ports(layout: Layout, controller: bool) -> list[int]:
    return [layout.kafka_controller_port] if controller else broker_ports(layout)


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


def _security_marker(layout: Layout) -> Path:
    """What security the three-node data was formatted with (``security.VERSION``)."""
    return layout.data("kafka") / "security"


def _security_properties(layout: Layout, i: int, controller: bool) -> dict[str, str]:
    """Three nodes: clients and brokers on SASL_SSL with SCRAM-SHA-512 (listener
    ``BROKER``); the controllers' listener on mutual TLS (SCRAM between KRaft
    controllers is poorly supported). Kafka reads the PEM files directly."""
    props = {
        "listener.security.protocol.map": "CONTROLLER:SSL,BROKER:SASL_SSL",
        # Every listener and every client inside the process (broker -> controller,
        # controller -> controller, broker -> broker) uses the node's certificate.
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(security.bundle(layout, f"node{i}")),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(security.ca_file(layout)),
        "ssl.endpoint.identification.algorithm": "https",
        "listener.name.controller.ssl.client.auth": "required",
    }
    if not controller:
        jaas = ("org.apache.kafka.common.security.scram.ScramLoginModule required "
                f'username="{security.KAFKA_BROKER_USER}" '
                f'password="{security.password(layout, "kafka-broker")}";')
        props.update({
            "inter.broker.listener.name": "BROKER",
            "sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
            "listener.name.broker.scram-sha-512.sasl.jaas.config": jaas,
        })
    return props


def _properties(layout: Layout, i: int, controller: bool = False) -> str:
    host = layout.hosts[i - 1]
    base = CONTROLLER_ID_BASE if split(layout) else 0
    voters = ",".join(f"{base + n}@{h}:{layout.kafka_controller_port}"
                      for n, h in enumerate(layout.hosts, start=1))
    rf = 3 if layout.nodes == 3 else 1
    secured = security.secured(layout)
    broker = f"{'BROKER' if secured else 'PLAINTEXT'}://{host}:{layout.kafka_port}"
    ctl = f"CONTROLLER://{host}:{layout.kafka_controller_port}"
    if not split(layout):
        roles: dict[str, str] = {"process.roles": "broker,controller", "node.id": str(i),
                                 "listeners": f"{broker},{ctl}", "advertised.listeners": broker}
    elif controller:
        roles = {"process.roles": "controller", "node.id": str(base + i), "listeners": ctl}
    else:
        roles = {"process.roles": "broker", "node.id": str(i), "listeners": broker,
                 "advertised.listeners": broker}
    # Cluster-wide defaults go to every process: in KRaft the controller applies the
    # topic defaults (partitions, replication) when it creates a topic.
    props = {
        **roles,
        "controller.quorum.voters": voters,
        "controller.listener.names": "CONTROLLER",
        **({} if controller else {"inter.broker.listener.name": "PLAINTEXT"}),
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(_node_dir(layout, i, controller) / "logs"),
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
    if secured:
        props.pop("inter.broker.listener.name", None)
        props.update(_security_properties(layout, i, controller))
    if rf == 3:
        # A broker that stops heartbeating is fenced, and its partitions led elsewhere,
        # after this (default 9 s, heartbeats every 2 s): a dead or cut-off broker's
        # partitions stall the pipeline that long, and with acks=all every partition it
        # follows in too (docs/reliability.md, broker-kill). Six heartbeats fit in it.
        # (The controllers read the first, the brokers the second.)
        props["broker.session.timeout.ms"] = "3000"
        props["broker.heartbeat.interval.ms"] = "500"
    return "\n".join(f"{k}={v}" for k, v in props.items()) + "\n"


def _prepare(layout: Layout, i: int, java: str, lib: Path, controller: bool = False) -> Path:
    node, name = _node_dir(layout, i, controller), _name(i, controller)
    marker = node / "formatted"
    if node.exists() and not marker.exists():
        print(f"stack: {name}: {node} is half-written (an earlier first start did not "
              f"finish); formatting it again", flush=True)
        shutil.rmtree(node)
    node.mkdir(parents=True, exist_ok=True)
    conf = node / "server.properties"
    # 0600: on three nodes it holds the broker's SCRAM password.
    fd = os.open(conf, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(_properties(layout, i, controller))
    if not marker.exists():
        run_checked([java, "-cp", f"{lib}/*", f"-Dlog4j2.configurationFile={TEMPLATES / 'log4j2.properties'}",
                     "kafka.tools.StorageTool", "format", "-t", _cluster_id(layout), "-c", str(conf),
                     *_scram_users(layout)],
                    f"{name} storage format", layout.logs / f"{name}.log")
        marker.write_text("ok\n")
    return conf


def _scram_users(layout: Layout) -> list[str]:
    """StorageTool arguments creating the SCRAM users at format time (three nodes):
    ``feed`` for the services, ``broker`` for the brokers themselves."""
    if not security.secured(layout):
        return []
    users = {"feed": security.password(layout, "kafka-feed"),
             security.KAFKA_BROKER_USER: security.password(layout, "kafka-broker")}
    out: list[str] = []
    for user, secret in users.items():
        out += ["--add-scram", f"SCRAM-SHA-512=[name={user},password={secret}]"]
    return out


def _reformat_if_insecure(layout: Layout) -> None:
    """Three-node data formatted without this security (no SCRAM users, or another
    version of it) cannot be reused: its metadata lacks the users. Wipe it, so that every
    process is formatted again (topics and offsets of that data are lost)."""
    if not security.secured(layout):
        return
    folder, marker = layout.data("kafka"), _security_marker(layout)
    recorded = marker.read_text().strip() if marker.is_file() else ""
    if recorded == security.VERSION:
        return
    if any(daemon(layout, i, c).alive() for i, c in _processes(layout)):
        raise StackError(f"kafka: {folder} was formatted {'as ' + recorded if recorded else 'without security'}"
                         f" and some of its processes run; 'down' the stack first")
    if folder.exists() and any(p.name != "security" for p in folder.iterdir()):
        print(f"stack: kafka: {folder} was formatted {'as ' + recorded if recorded else 'without security'};"
              f" formatting it again as {security.VERSION} (its topics are lost)", flush=True)
        shutil.rmtree(folder)
    folder.mkdir(parents=True, exist_ok=True)
    marker.write_text(security.VERSION + "\n")


def _argv(layout: Layout, java: str, lib: Path, conf: Path, controller: bool = False,
          i: int = 1, agent: Path | None = None) -> list[str]:
    """The JVM's command line for process ``i``; with ``agent`` (the JMX exporter's jar)
    the exporter serves on the node's address (exporters.py)."""
    heap = CONTROLLER_HEAP_MB if controller else layout.kafka_heap_mb
    exporter = [] if agent is None else [
        exporters.javaagent(agent, layout.hosts[i - 1], exporters.kafka_port(layout, controller),
                            exporters.KAFKA_CONFIG)]
    return [java, f"-Xms{heap}m", f"-Xmx{heap}m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
            "-Djava.awt.headless=true", f"-Dlog4j2.configurationFile={TEMPLATES / 'log4j2.properties'}",
            f"-Dkafka.logs.dir={layout.logs}", *exporter, "-cp", f"{lib}/*", "kafka.Kafka", str(conf)]


def _brokers_ready(layout: Layout) -> bool:
    if not all(port_open(h, layout.kafka_port) for h in layout.hosts):
        return False
    admin = kafka_clients.admin(security.client_settings(layout), {"socket.timeout.ms": 2000},
                                logger=_QUIET)
    return len(admin.list_topics(timeout=3).brokers) == layout.nodes


def up(layout: Layout, started: list[Daemon]) -> UpReport:
    java = java17(layout)
    lib = jars(layout, "kafka")
    pending = [(i, c) for i, c in _processes(layout) if not daemon(layout, i, c).alive()]
    if not pending:
        return {"state": "already running"}
    agent = exporters.jmx_agent(layout)
    ensure_ports_free("kafka", [(layout.hosts[i - 1], p) for i, c in pending
                                for p in [*_ports(layout, c), exporters.kafka_port(layout, c)]])
    security.ensure(layout)
    _reformat_if_insecure(layout)
    # All start together: the controller quorum needs a majority to elect.
    for i, c in pending:
        conf = _prepare(layout, i, java, lib, c)
        d = daemon(layout, i, c)
        spawn(d, _argv(layout, java, lib, conf, c, i, agent))
        started.append(d)
    waited = 0.0
    for i, c in pending:
        d = daemon(layout, i, c)
        waited = max(waited, wait_ready(d, d.name, lambda: _brokers_ready(layout),
                                        timeout=120, log_file=d.log_file))
    return {"state": "started", "seconds": round(waited, 1)}


def down(layout: Layout) -> bool:
    """The brokers first, all at once, while the controllers still answer their
    controlled shutdown; then the controllers. Signalled together, the brokers waited
    for a quorum that had gone until their 30 s grace ran out."""
    daemons = [(c, daemon(layout, i, c)) for i, c in _processes(layout)]
    brokers = stop_many([d for c, d in daemons if not c], grace=30)
    controllers = stop_many([d for c, d in daemons if c], grace=30)
    return bool(brokers or controllers)


def status(layout: Layout) -> list[StatusRow]:
    return [status_row(daemon(layout, i, c),
                       f"{layout.hosts[i - 1]}:{layout.kafka_controller_port if c else layout.kafka_port}")
            for i, c in _processes(layout)]
