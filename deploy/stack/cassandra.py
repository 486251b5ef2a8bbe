"""Apache Cassandra 5.0 from its Maven Central jars, one node or three, on JDK 17.

``CassandraDaemon`` runs from ``cassandra-all``'s runtime classpath. Without the JPMS
flags of Cassandra's ``conf/jvm17-server.options`` and the jamm agent the JVM dies at
start; the start-up shortcuts (gossip settle, ring delay) cut tens of seconds on 2 cores.
Every node also carries the Prometheus JMX exporter's agent, serving its few metrics
(``deploy/prometheus/jmx-cassandra.yml``) on the node's address, port
``FEED_CASSANDRA_EXPORTER_PORT`` (exporters.py).
"""
from __future__ import annotations

import hashlib
import shutil
import time
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from . import exporters, security
from .layout import REPO, Layout
from .process import (Daemon, StackError, StatusRow, UpReport, ensure_ports_free, spawn, status_row,
                      stop_many, wait_ready)
from .toolchain import java17, jars

if TYPE_CHECKING:
    from cassandra.cluster import Cluster, Session

TEMPLATES = REPO / "deploy" / "stack" / "templates"

# From Cassandra 5.0's conf/jvm17-server.options (JPMS section), required on JDK 17.
JPMS_FLAGS = [
    "-Djdk.attach.allowAttachSelf=true",
    *[f"--add-exports={m}=ALL-UNNAMED" for m in (
        "java.base/jdk.internal.misc", "java.management.rmi/com.sun.jmx.remote.internal.rmi",
        "java.rmi/sun.rmi.registry", "java.rmi/sun.rmi.server", "java.sql/java.sql",
        "java.base/java.lang.ref", "jdk.unsupported/sun.misc",
        "jdk.compiler/com.sun.tools.javac.file", "jdk.attach/sun.tools.attach")],
    *[f"--add-opens={m}=ALL-UNNAMED" for m in (
        "java.base/java.lang.module", "java.base/jdk.internal.loader", "java.base/jdk.internal.ref",
        "java.base/jdk.internal.reflect", "java.base/jdk.internal.math",
        "java.base/jdk.internal.module", "java.base/jdk.internal.util.jar",
        "jdk.management/com.sun.management.internal", "java.base/sun.nio.ch", "java.base/java.io",
        "java.base/java.lang.reflect", "jdk.compiler/com.sun.tools.javac", "java.base/java.lang",
        "java.base/java.util")],
    "-Dio.netty.tryReflectionSetAccessible=true",
    "-Dio.netty.allocator.useCacheForAllThreads=true",
    "-Dio.netty.allocator.maxOrder=11",
]

# Evenly spaced Murmur3 tokens for a three-node ring with num_tokens: 1.
TOKENS = ["-9223372036854775808", "-3074457345618258603", "3074457345618258602"]
# How long each node may take to see its whole ring once every node runs (``up``).
RING_READY_S = 300
# How long a node may take to answer CQL once spawned. A node restarted under the fault
# suite's load on two shared cores answered after 104 s (2026-12-07, cassandra-kill; its
# log shows every start phase slowed alike, the CPU taken) and, in CI the same day,
# not within 240 s; the machines' speed varies up to 3x from day to day. A node that
# dies is reported at once, so the budget costs time only to a live node that hangs.
NODE_READY_S = 480


def _node_dir(layout: Layout, i: int) -> Path:
    return layout.data("cassandra") / f"node{i}"


def daemon(layout: Layout, i: int) -> Daemon:
    return Daemon(name=f"cassandra-{i}", pid_file=layout.run / f"cassandra-{i}.pid",
                  log_file=layout.logs / f"cassandra-{i}.log", marker=str(_node_dir(layout, i)))


def _yaml(layout: Layout, i: int) -> str:
    node = _node_dir(layout, i)
    host = layout.hosts[i - 1]
    lines = [
        "cluster_name: feed",
        "num_tokens: 1",
        "partitioner: org.apache.cassandra.dht.Murmur3Partitioner",
        "commitlog_sync: periodic",
        "commitlog_sync_period: 10000ms",
        "endpoint_snitch: SimpleSnitch",
        "seed_provider:",
        "  - class_name: org.apache.cassandra.locator.SimpleSeedProvider",
        "    parameters:",
        f'      - seeds: "{layout.hosts[0]}:{layout.cassandra_storage_port}"',
        f"listen_address: {host}",
        f"rpc_address: {host}",
        f"storage_port: {layout.cassandra_storage_port}",
        f"native_transport_port: {layout.cassandra_port}",
        "start_native_transport: true",
        f"data_file_directories: [{node / 'data'}]",
        f"commitlog_directory: {node / 'commitlog'}",
        f"saved_caches_directory: {node / 'saved_caches'}",
        f"hints_directory: {node / 'hints'}",
        *(_security_yaml(layout, i) if security.secured(layout) else
          ["authenticator: AllowAllAuthenticator", "authorizer: AllowAllAuthorizer"]),
        "auto_bootstrap: false",
        "storage_compatibility_mode: NONE",
        # Two cores are shared with everything else: keep background work small.
        "concurrent_compactors: 1",
        "concurrent_reads: 16",
        "concurrent_writes: 32",
        # Inbox partitions are trimmed by TTL and deletes; warn early if a read ever
        # walks a pile of tombstones (the data model is meant to prevent it).
        "tombstone_warn_threshold: 1000",
        # The fan-out sends a post's inbox rows as unlogged batches of up to 200 rows
        # (fanout_batch_rows) that share their replicas (services/fanout/inbox.py); that
        # is by design, not a misuse to warn about on every batch (the worker logged each
        # warning: 2 % of its CPU). A production cluster warns at 10 by default: raise it
        # there too, above fanout_batch_rows (docs/fanout.md).
        "unlogged_batch_across_partitions_warn_threshold: 256",
        # The fan-out's batches above may pass the default 5 KiB by design. The API's
        # snapshot batches (services/api/snapshots/snapshot_writer.py, up to 400 KB) are of
        # one partition, which Cassandra does not size-check.
        "batch_size_warn_threshold: 48KiB",
        # Tests and benches drop their keyspaces all day: Cassandra's default snapshot of
        # every dropped table kept them all on disk (1.1 GB of the one-node stack's 1.1 GB
        # after a day of runs) and flushed each one first. A cluster of your own keeps
        # its own setting.
        "auto_snapshot: false",
    ]
    if layout.cassandra_memtable_mb:
        # Bigger memtables, fewer and larger flushes: see Layout.from_env.
        lines.append(f"memtable_heap_space: {layout.cassandra_memtable_mb}MiB")
    if layout.nodes == 3:
        lines.append(f"initial_token: {TOKENS[i - 1]}")
    return "\n".join(lines) + "\n"


def _security_yaml(layout: Layout, i: int) -> list[str]:
    """Three nodes: password roles with permissions, and TLS for clients (required) and
    between the nodes (mutual), from the stack's PEM files."""
    stores = [
        "  ssl_context_factory:",
        "    class_name: org.apache.cassandra.security.PEMBasedSslContextFactory",
        f"  keystore: {security.bundle(layout, f'node{i}')}",
        f"  truststore: {security.ca_file(layout)}",
    ]
    return [
        "authenticator: PasswordAuthenticator",
        "authorizer: CassandraAuthorizer",
        "role_manager: CassandraRoleManager",
        "client_encryption_options:",
        "  enabled: true",
        "  optional: false",
        "  require_client_auth: false",
        *stores,
        "server_encryption_options:",
        "  internode_encryption: all",
        "  optional: false",
        "  require_client_auth: true",
        "  require_endpoint_verification: false",
        *stores,
    ]


def _jmx_port(layout: Layout, i: int) -> int:
    return layout.cassandra_jmx_base + 100 * (i - 1)


def _argv(layout: Layout, i: int, java: str, lib: Path, agent: Path | None = None) -> list[str]:
    """Node ``i``'s command line; with ``agent`` (the JMX exporter's jar) the exporter
    serves on the node's address (exporters.py)."""
    node = _node_dir(layout, i)
    heap = layout.cassandra_heap_mb
    jamm = next(lib.glob("jamm-*.jar"), None)
    if jamm is None:
        raise StackError(f"cassandra: no jamm agent jar in {lib}; run 'reset' to reassemble")
    return [
        java, f"-Xms{heap}m", f"-Xmx{heap}m", "-Xss512k", "-XX:+UseG1GC",
        # From 2 GB, 16 MiB regions: at G1's default 1 MiB for such a heap, every 1 MiB
        # memtable slab was a humongous object, and 13 of 15 concurrent cycles in a full
        # run's history window were started by them (docs/fanout.md, "The node's memtables").
        *(["-XX:G1HeapRegionSize=16m"] if heap >= 2048 else []),
        "-XX:+ParallelRefProcEnabled", "-XX:MaxTenuringThreshold=1",
        "-XX:+HeapDumpOnOutOfMemoryError", f"-XX:HeapDumpPath={node}",
        *JPMS_FLAGS,
        f"-javaagent:{jamm}",
        *([] if agent is None else [exporters.javaagent(agent, layout.hosts[i - 1],
                                                        layout.cassandra_exporter_port,
                                                        exporters.CASSANDRA_CONFIG)]),
        "-Djava.net.preferIPv4Stack=true",
        "-Dchronicle.analytics.disable=true",
        f"-Dcassandra.config=file://{node / 'cassandra.yaml'}",
        f"-Dcassandra.storagedir={node}",
        f"-Dcassandra.logdir={layout.logs}",
        "-Dcassandra-foreground=yes",
        f"-Dlogback.configurationFile={TEMPLATES / 'logback.xml'}",
        f"-Dcassandra.jmx.local.port={_jmx_port(layout, i)}",
        "-Dcassandra.skip_wait_for_gossip_to_settle=0",
        "-Dcassandra.ring_delay_ms=1000",
        # The default role's setup task (one node: not used, AllowAllAuthenticator; three
        # nodes: the 'cassandra' role the stack logs in with once, _secure_roles) runs
        # and, until a quorum of the ring is up, fails and reschedules itself after
        # this delay: at 0 it spun, ~500,000 log lines a minute per waiting node of the
        # three-node stack (a 0.9 GB log, CPU taken from the nodes still starting).
        "-Dcassandra.superuser_setup_delay_ms=2000",
        "-cp", f"{lib}/*", "org.apache.cassandra.service.CassandraDaemon",
    ]


def _prepare(layout: Layout, i: int) -> None:
    node = _node_dir(layout, i)
    marker = node / "initialized"
    if node.exists() and not marker.exists():
        print(f"stack: cassandra-{i}: {node} is half-written (an earlier first start did not "
              f"finish); initialising it again", flush=True)
        shutil.rmtree(node)
    node.mkdir(parents=True, exist_ok=True)
    (node / "cassandra.yaml").write_text(_yaml(layout, i))


def _auth_refused(exc: BaseException) -> bool:
    """The node answered a CQL connection with an authentication error."""
    from cassandra import AuthenticationFailed
    from cassandra.cluster import NoHostAvailable

    return isinstance(exc, NoHostAvailable) and any(
        isinstance(e, AuthenticationFailed) for e in exc.errors.values())


def _probe(layout: Layout, i: int, *, ring: bool) -> bool:
    """A real CQL query on node ``i``; with ``ring``, also that it sees every peer.

    On three nodes (TLS, passwords) a node whose native transport answers the TLS
    handshake and the login, even with a refusal, is up: until a quorum of the ring runs,
    no login can be checked (the roles are replicated three times), and on a first start
    the stack's role does not exist yet (``_secure_roles``). The ring check needs the
    login to succeed."""
    from services.shared.clients import cql

    host = layout.hosts[i - 1]
    cluster = cql.cluster(security.client_settings(layout), contact_points=[host], connect_timeout=5,
                          timeout=10, probe=True)
    try:
        try:
            session = cluster.connect()
        except Exception as exc:
            if not ring and security.secured(layout) and _auth_refused(exc):
                return True
            raise
        node = cluster.metadata.get_host(host)
        if node is None:
            return False
        session.execute("SELECT release_version FROM system.local", host=node)
        if not ring:
            return True
        return len(session.execute("SELECT peer FROM system.peers_v2", host=node).all()) == \
            layout.nodes - 1
    finally:
        cluster.shutdown()


def _roles_marker(layout: Layout) -> Path:
    return layout.data("cassandra") / "roles"


def _roles_stamp(layout: Layout) -> str:
    """What the roles were last set up with (the passwords' digest, not the passwords)."""
    digest = hashlib.sha256("\n".join(security.password(layout, n) for n in
                                      ("cassandra-admin", "cassandra-feed")).encode()).hexdigest()
    return f"{security.VERSION} {digest}"


def _login(layout: Layout, user: str, password: str) -> tuple["Cluster", "Session"]:
    from services.shared.clients import cql

    settings = security.client_settings(layout, cassandra_username=user, cassandra_password=password)
    cluster = cql.cluster(settings, timeout=15, connect_timeout=5)
    try:
        return cluster, cluster.connect()
    except BaseException:
        cluster.shutdown()
        raise


def _secure_roles(layout: Layout) -> None:
    """Three nodes, once the ring is up: ``system_auth`` replicated three times, a
    superuser ``admin`` and a login role ``feed`` (all permissions on every keyspace, not
    a superuser) with the generated passwords, and the default ``cassandra`` superuser
    disabled. Idempotent: a later run logs in as ``admin`` and re-applies the rest."""
    from cassandra import ConsistencyLevel, InvalidRequest
    from cassandra.query import SimpleStatement

    admin_pw = security.password(layout, "cassandra-admin")
    feed_pw = security.password(layout, "cassandra-feed")
    try:
        cluster, session = _login(layout, security.CASSANDRA_ADMIN, admin_pw)
    except Exception as exc:
        if not _auth_refused(exc):
            raise
        # First run: the default superuser (made by the nodes a few seconds after a
        # quorum is up; until then this login fails and the caller retries).
        cluster, session = _login(layout, "cassandra", "cassandra")
        try:
            dc = session.execute("SELECT data_center FROM system.local").one().data_center
            session.execute("ALTER KEYSPACE system_auth WITH replication = "
                            f"{{'class': 'NetworkTopologyStrategy', '{dc}': {layout.nodes}}}")
            # The rows written at RF 1 live on one replica: a read at ALL repairs them onto
            # every replica (blocking read repair), so no 'nodetool repair' is needed.
            for table in ("roles", "role_members", "role_permissions"):
                session.execute(SimpleStatement(f"SELECT * FROM system_auth.{table}",
                                                consistency_level=ConsistencyLevel.ALL))
            _create_or_alter(session, security.CASSANDRA_ADMIN,
                             f"SUPERUSER = true AND LOGIN = true AND PASSWORD = '{admin_pw}'")
        finally:
            cluster.shutdown()
        cluster, session = _login(layout, security.CASSANDRA_ADMIN, admin_pw)
    try:
        _create_or_alter(session, "feed", f"LOGIN = true AND PASSWORD = '{feed_pw}'")
        # Migrations create, alter and drop keyspaces; the services read and write them.
        session.execute("GRANT ALL PERMISSIONS ON ALL KEYSPACES TO feed")
        try:
            session.execute("ALTER ROLE cassandra WITH SUPERUSER = false AND LOGIN = false")
        except InvalidRequest:
            pass  # no such role (dropped by hand): nothing to disable
    finally:
        cluster.shutdown()


def _create_or_alter(session: "Session", role: str, options: str) -> None:
    """CREATE the role, or ALTER it to ``options`` when it exists (a run interrupted
    after creating it, or new passwords). Not both: a role's password may change only
    every few seconds."""
    from cassandra import ConsistencyLevel
    from cassandra.query import SimpleStatement

    exists = session.execute(SimpleStatement("SELECT role FROM system_auth.roles WHERE role = %s",
                                             consistency_level=ConsistencyLevel.QUORUM), [role]).one()
    session.execute(f"{'ALTER' if exists else 'CREATE'} ROLE {role} WITH {options}")


def _ensure_roles(layout: Layout, timeout: float = 120) -> float:
    """``_secure_roles`` once per set of passwords, retried while authentication
    settles after a start (the default role appears seconds after a quorum is up, and
    role reads need a quorum). Returns the seconds spent."""
    marker, stamp = _roles_marker(layout), _roles_stamp(layout)
    if marker.is_file() and marker.read_text().strip() == stamp:
        return 0.0
    start = time.monotonic()
    while True:
        try:
            _secure_roles(layout)
            break
        except Exception as exc:  # noqa: BLE001 - auth settling looks like any failure
            if time.monotonic() - start > timeout:
                raise StackError(f"cassandra: the roles could not be set up in {timeout:.0f}s: "
                                 f"{type(exc).__name__}: {str(exc)[:500]}") from None
            time.sleep(1)
    marker.write_text(stamp + "\n")
    return time.monotonic() - start


def nodetool(layout: Layout, *args: str, node: int = 1, timeout: float = 300) -> str:
    """Run ``nodetool ARGS`` against a running node over JMX (``compact``, ``flush``,
    ``tablestats`` ...); returns its output. ``NodeTool`` is in ``cassandra-all`` and
    needs the same JPMS flags as the daemon."""
    import subprocess
    lib = jars(layout, "cassandra")
    argv = [java17(layout), "-Xmx256m", *JPMS_FLAGS,
            f"-Dlogback.configurationFile={TEMPLATES / 'logback.xml'}", "-cp", f"{lib}/*",
            "org.apache.cassandra.tools.NodeTool", "-h", "127.0.0.1",
            "-p", str(_jmx_port(layout, node)), *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise StackError(f"nodetool {' '.join(args)} failed: {done.stderr.strip()[-500:]}")
    return done.stdout


def up(layout: Layout, started: list[Daemon]) -> UpReport:
    java = java17(layout)
    lib = jars(layout, "cassandra")
    agent: Path | None = None
    security.ensure(layout)
    waited = 0.0
    any_started = False
    # One node at a time: a joining node must see the ring settled before the next.
    for i in range(1, layout.nodes + 1):
        d = daemon(layout, i)
        if d.alive():
            continue
        ensure_ports_free(f"cassandra-{i}", [(layout.hosts[i - 1], layout.cassandra_port),
                                             (layout.hosts[i - 1], layout.cassandra_storage_port),
                                             ("127.0.0.1", _jmx_port(layout, i)),
                                             (layout.hosts[i - 1], layout.cassandra_exporter_port)])
        _prepare(layout, i)
        agent = agent or exporters.jmx_agent(layout)
        spawn(d, _argv(layout, i, java, lib, agent))
        started.append(d)
        any_started = True
        # Peers check only after all nodes are up; first wait for this node's own CQL.
        waited += wait_ready(d, f"cassandra-{i}", partial(_probe, layout, i, ring=False),
                             timeout=NODE_READY_S, log_file=d.log_file)
        (_node_dir(layout, i) / "initialized").write_text("ok\n")
    if security.secured(layout):
        waited += _ensure_roles(layout)
    if not any_started:
        return {"state": "already running"}
    # A node restarted under load (the fault suite's kill: the services' traffic goes on,
    # the others replay their hints to it) answered every probe only minutes later on
    # two shared cores; a healthy ring answers the first probe.
    for i in range(1, layout.nodes + 1):
        d = daemon(layout, i)
        waited += wait_ready(d, f"cassandra-{i} ring", partial(_probe, layout, i, ring=True),
                             timeout=RING_READY_S, log_file=d.log_file)
    return {"state": "started", "seconds": round(waited, 1)}


def down(layout: Layout) -> bool:
    return bool(stop_many([daemon(layout, i) for i in range(1, layout.nodes + 1)], grace=45))


def status(layout: Layout) -> list[StatusRow]:
    return [status_row(daemon(layout, i), f"{layout.hosts[i - 1]}:{layout.cassandra_port}")
            for i in range(1, layout.nodes + 1)]
