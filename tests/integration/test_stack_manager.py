"""The stack manager itself, on a second, private stack (own folder, own ports).

The jars are shared with the main stack through FEED_STACK_LIB so nothing is downloaded
again. Every test leaves nothing running.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy.stack.layout import REPO, Layout
from services.shared.clients import pg
from services.shared.settings import Settings
from tests.conftest import require
from tests.support.ports import free_ports

PORT_NAMES = ("FEED_PG_PORT", "FEED_KAFKA_PORT", "FEED_KAFKA_CONTROLLER_PORT", "FEED_CASSANDRA_PORT",
              "FEED_CASSANDRA_STORAGE_PORT", "FEED_CASSANDRA_JMX_PORT", "FEED_PROMETHEUS_PORT",
              "FEED_KAFKA_EXPORTER_PORT", "FEED_KAFKA_CONTROLLER_EXPORTER_PORT",
              "FEED_CASSANDRA_EXPORTER_PORT", "FEED_POSTGRES_EXPORTER_PORT")


def stack_ports() -> dict[str, str]:
    """The private stack's ports, picked now (tests/support/ports.py says why not at
    collection time, and why not from the ephemeral range)."""
    return free_ports(PORT_NAMES)


@pytest.fixture()
def private_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    require("postgres", "kafka", "cassandra")  # the main stack assembled the jars
    env = {**os.environ, **stack_ports(), "FEED_STACK_DIR": str(tmp_path / "stack"),
           "FEED_STACK_LIB": str(Layout.from_env(nodes=1).lib)}
    env.pop("FEED_STACK_NODES", None)
    for name in ("FEED_KAFKA_BOOTSTRAP", "FEED_CASSANDRA_HOSTS"):
        env.pop(name, None)
    os.chmod(tmp_path, 0o755)  # the postgres user must reach its data folder
    yield env
    # reset, not down: a Postgres folder that fell back to /var/lib/postgresql goes too.
    subprocess.run([sys.executable, "-m", "deploy.stack", "reset"], env=env, cwd=REPO,
                   capture_output=True, timeout=180)


def stack(env: dict[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "deploy.stack", *args], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)


def status(env: dict[str, str]) -> dict[str, dict]:
    return {r["name"]: r for r in json.loads(stack(env, "status", "--json").stdout)}


def test_up_twice_status_down_and_restart_keep_data(private_env: dict[str, str]) -> None:
    first = stack(private_env, "up")
    assert first.returncode == 0, first.stderr
    rows = status(private_env)
    assert set(rows) == {"postgres", "postgres-exporter", "kafka-1", "cassandra-1", "prometheus"}
    assert all(r["pid"] for r in rows.values())
    pids = {name: r["pid"] for name, r in rows.items()}

    # The private stack's superuser (trust on a development stack): the feed role may not
    # create tables in database postgres.
    su = Settings(pg_host="127.0.0.1", pg_port=int(private_env["FEED_PG_PORT"]), pg_user="postgres",
                  pg_database="postgres")
    with pg.connect(su, autocommit=True) as conn:
        conn.execute("CREATE TABLE kept (v int)")
        conn.execute("INSERT INTO kept VALUES (7)")

    again = stack(private_env, "up")
    assert again.returncode == 0, again.stderr
    assert "already running" in again.stdout
    assert {name: r["pid"] for name, r in status(private_env).items()} == pids

    down = stack(private_env, "down")
    assert down.returncode == 0 and "stopped" in down.stdout
    assert not any(r["pid"] for r in status(private_env).values())
    for pid in pids.values():
        assert not Path(f"/proc/{pid}").exists() or b"stack" not in Path(f"/proc/{pid}/cmdline").read_bytes()

    restart = stack(private_env, "up")
    assert restart.returncode == 0, restart.stderr
    with pg.connect(su) as conn:
        assert conn.execute("SELECT v FROM kept").fetchone() == (7,)


def test_taken_port_is_named_and_nothing_is_left_running(private_env: dict[str, str]) -> None:
    with socket.socket() as squatter:
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        squatter.bind(("127.0.0.1", int(private_env["FEED_KAFKA_PORT"])))
        squatter.listen()
        result = stack(private_env, "up", "--only", "kafka")
    assert result.returncode == 2
    assert f"127.0.0.1:{private_env['FEED_KAFKA_PORT']} is already taken" in result.stderr
    assert not status(private_env)["kafka-1"]["pid"]


def test_server_dying_during_start_names_its_log(private_env: dict[str, str]) -> None:
    env = {**private_env, "FEED_KAFKA_HEAP_MB": "1"}  # the JVM refuses a 1 MB heap
    result = stack(env, "up", "--only", "kafka")
    assert result.returncode == 2
    assert "kafka-1 exited during start" in result.stderr
    assert "kafka-1.log" in result.stderr
    assert not status(private_env)["kafka-1"]["pid"]


def test_missing_jdk17_is_reported(private_env: dict[str, str]) -> None:
    result = stack({**private_env, "FEED_JAVA17": "/nonexistent/java"}, "up", "--only", "kafka")
    assert result.returncode == 2
    assert "JDK 17 is missing" in result.stderr


def test_half_written_data_folder_is_initialised_again(private_env: dict[str, str]) -> None:
    node = Path(private_env["FEED_STACK_DIR"]) / "data" / "kafka-1n" / "node1"
    node.mkdir(parents=True)
    (node / "logs").mkdir()
    (node / "logs" / "garbage").write_text("interrupted first start")
    result = stack(private_env, "up", "--only", "kafka")
    assert result.returncode == 0, result.stderr
    assert "half-written" in result.stdout
    assert status(private_env)["kafka-1"]["pid"]


def test_down_never_signals_a_process_it_did_not_start(private_env: dict[str, str]) -> None:
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        run = Path(private_env["FEED_STACK_DIR"]) / "run" / "1n"
        run.mkdir(parents=True)
        (run / "kafka-1.pid").write_text(str(bystander.pid))  # a stale or recycled pid
        assert stack(private_env, "down").returncode == 0
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()


# Three-node mode (secured: TLS, SCRAM, passwords) is checked in test_secured_stack.py,
# on one three-node start for all its tests.
