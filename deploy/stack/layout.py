"""Where the stack lives and how it is addressed: one git-ignored folder, loopback ports.

Everything is read from environment variables with loopback defaults, so two checkouts
(or CI beside a developer's stack) can run side by side by changing ports and the folder.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# The servers' memory by stack size (1 or 3 nodes), unless the environment says otherwise
# (``Layout.from_env``, which says why). Memtables 0: Cassandra's default (a quarter of
# the heap).
KAFKA_HEAP_MB = 512
CASSANDRA_HEAP_MB = {1: 2048, 3: 768}
CASSANDRA_MEMTABLE_MB = {1: 1024, 3: 0}


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    return int(raw) if raw else default


@dataclass(frozen=True)
class Layout:
    """Paths and addresses of one stack. ``nodes`` is 1 (default) or 3 (fault tests)."""

    root: Path
    nodes: int
    pg_host: str = "127.0.0.1"
    pg_port: int = 55432
    kafka_port: int = 9092
    kafka_controller_port: int = 9093
    cassandra_port: int = 9042
    cassandra_storage_port: int = 7000
    cassandra_jmx_base: int = 7199
    # The stores' Prometheus exporters (deploy/stack/exporters.py): the JMX exporter's
    # agent in each broker (the one-node combined process included), each KRaft
    # controller of three nodes and each Cassandra node, bound to the node's own address
    # (so every node uses the same port); Debian's postgres exporter on 127.0.0.1.
    kafka_exporter_port: int = 9404
    kafka_controller_exporter_port: int = 9405
    cassandra_exporter_port: int = 9406
    postgres_exporter_port: int = 9407
    kafka_heap_mb: int = KAFKA_HEAP_MB
    cassandra_heap_mb: int = CASSANDRA_HEAP_MB[1]
    cassandra_memtable_mb: int | None = CASSANDRA_MEMTABLE_MB[1] or None
    hosts: tuple[str, ...] = field(default=())

    @classmethod
    def from_env(cls, nodes: int | None = None) -> "Layout":
        root = Path(os.environ.get("FEED_STACK_DIR", REPO / ".stack")).resolve()
        if nodes is None:
            nodes = _env_int("FEED_STACK_NODES", 0) or _saved_nodes(root) or 1
        if nodes not in (1, 3):
            raise SystemExit(f"stack: --nodes must be 1 or 3, not {nodes}")
        # 127.0.0.0/8 is all loopback: three nodes need no network set-up.
        hosts = tuple(f"127.0.0.{i}" for i in range(1, nodes + 1))
        cassandra_heap = _env_int("FEED_CASSANDRA_HEAP_MB", CASSANDRA_HEAP_MB[nodes])
        return cls(
            root=root,
            nodes=nodes,
            pg_host=os.environ.get("FEED_PG_HOST", "127.0.0.1"),
            pg_port=_env_int("FEED_PG_PORT", 55432),
            kafka_port=_env_int("FEED_KAFKA_PORT", 9092),
            kafka_controller_port=_env_int("FEED_KAFKA_CONTROLLER_PORT", 9093),
            cassandra_port=_env_int("FEED_CASSANDRA_PORT", 9042),
            cassandra_storage_port=_env_int("FEED_CASSANDRA_STORAGE_PORT", 7000),
            cassandra_jmx_base=_env_int("FEED_CASSANDRA_JMX_PORT", 7199),
            kafka_exporter_port=_env_int("FEED_KAFKA_EXPORTER_PORT", 9404),
            kafka_controller_exporter_port=_env_int("FEED_KAFKA_CONTROLLER_EXPORTER_PORT", 9405),
            cassandra_exporter_port=_env_int("FEED_CASSANDRA_EXPORTER_PORT", 9406),
            postgres_exporter_port=_env_int("FEED_POSTGRES_EXPORTER_PORT", 9407),
            # 512 MB is plenty for a test broker. One Cassandra node gets 2 GB, half of it
            # for memtables (Cassandra's default is a quarter): at 256 MB the inbox table
            # flushed every ~30 MB of rows during a backlog, and leveled compaction
            # rewrote the whole table at each flush (docs/fanout.md, "The node's
            # memtables"). Three nodes share 2 cores and 24 GiB with Postgres, Kafka and
            # the services: 768 MB each, memtables at Cassandra's default.
            kafka_heap_mb=_env_int("FEED_KAFKA_HEAP_MB", KAFKA_HEAP_MB),
            cassandra_heap_mb=cassandra_heap,
            # At most half the heap, whatever FEED_CASSANDRA_HEAP_MB says; 0: the default.
            cassandra_memtable_mb=min(_env_int("FEED_CASSANDRA_MEMTABLE_MB", CASSANDRA_MEMTABLE_MB[nodes]),
                                      cassandra_heap // 2) or None,
            hosts=hosts,
        )

    # Folders -----------------------------------------------------------------
    @property
    def lib(self) -> Path:
        # Jars are large and identical for every stack: FEED_STACK_LIB lets a second
        # stack (the stack manager's own tests) share the first one's.
        return Path(os.environ.get("FEED_STACK_LIB", self.root / "lib"))

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def run(self) -> Path:
        # Pid files per mode: node 1 of the single-node and three-node stacks differ.
        return self.root / "run" / f"{self.nodes}n"

    def data(self, component: str) -> Path:
        # Single-node and three-node data never mix: each mode has its own folder.
        return self.root / "data" / f"{component}-{self.nodes}n"

    # Addresses ---------------------------------------------------------------
    @property
    def kafka_bootstrap(self) -> str:
        return ",".join(f"{h}:{self.kafka_port}" for h in self.hosts)

    @property
    def cassandra_hosts(self) -> str:
        return ",".join(self.hosts)

    def client_env(self) -> dict[str, str]:
        """The FEED_* variables that point the project's clients at this stack. On three
        nodes (secured: TLS, SCRAM, passwords) also the client security settings of
        ``deploy/secured-stack.env``, with the stack folder's paths filled in."""
        env = {
            "FEED_PG_HOST": self.pg_host,
            "FEED_PG_PORT": str(self.pg_port),
            "FEED_KAFKA_BOOTSTRAP": self.kafka_bootstrap,
            "FEED_CASSANDRA_HOSTS": self.cassandra_hosts,
            "FEED_CASSANDRA_PORT": str(self.cassandra_port),
            "FEED_CASSANDRA_REPLICATION_FACTOR": str(self.nodes),
        }
        from . import security
        if security.secured(self):
            env.update(security.env_file_settings(self))
        return env

    def use_as_default(self) -> None:
        """Point this process's clients at the stack unless FEED_* variables already say
        otherwise (and drop a settings object read before): what a command run beside
        the stack (``make migrate``, ``make faults``) needs, on one node or three."""
        from services.shared.settings import forget_loaded
        for key, value in self.client_env().items():
            os.environ.setdefault(key, value)
        forget_loaded()

    def save_state(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "state.json").write_text(json.dumps({"nodes": self.nodes}))


def _saved_nodes(root: Path) -> int:
    try:
        return int(json.loads((root / "state.json").read_text())["nodes"])
    except (OSError, ValueError, KeyError):
        return 0
