"""The two HTTP services under test, as real subprocesses on free loopback ports.

* ``ours``: ``python -m services.api`` (FEED_API_WORKERS=``workers``, default 1) on the
  bench's database, keyspace and topic prefix (all named like the database: its stream
  consumer sees no other traffic); ready when ``/readyz`` answers 200.
* ``pull-<shape>``: ``python -m bench.read.pull_service --query <shape> --workers <workers>`` on
  the same database; ready when ``/healthz`` answers 200.

Both reach the running stack by its client settings (``stack_client_env``), whatever
their tree's defaults, and get the run's own JWT secret and cursor key (``secrets_env``:
FEED_JWT_SECRET, FEED_CURSOR_KEYS), never the built-in development ones. ``Servers`` is
a context manager: every process it started is terminated (then killed) on the way out, whatever happened. Store pids (Postgres, Cassandra) come from the stack
manager, for the CPU the stores spend per page.
"""
from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Callable

from bench.harness.wrk_load import tree_cpu_s
from deploy.stack.layout import Layout

ROOT = Path(__file__).resolve().parents[2]
# Our API connects to Postgres, Cassandra and Kafka and pins stream offsets before
# /readyz says ready: tens of seconds on a loaded 2-core machine.
READY_DEADLINE_S = 120
# Grace between SIGTERM and SIGKILL: uvicorn drains in well under this.
STOP_GRACE_S = 15


@dataclass
class Server:
    name: str
    url: str
    process: subprocess.Popen[bytes]
    ready_path: str

    @property
    def pid(self) -> int:
        return self.process.pid


def stack_client_env() -> dict[str, str]:
    """This environment, with the local stack's client settings (``deploy.stack env``) for
    every FEED_* variable it does not set: a tree whose defaults differ (an A/B base from
    before a port or security change) still reaches the running stack."""
    return {**Layout.from_env().client_env(), **os.environ}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _component(name: str) -> str:
    """A stack process's component: ``cassandra-2`` -> cassandra; every Kafka process
    (brokers, controllers) -> kafka; ``postgres-exporter`` stays itself, not Postgres."""
    base = re.sub(r"-\d+$", "", name)
    return "kafka" if base.startswith("kafka") else base


def stack_pids() -> list[tuple[str, int]]:
    """(component, pid) of every running process of the stack, e.g. ("cassandra", 123)
    once per node."""
    out = subprocess.run([sys.executable, "-m", "deploy.stack", "status", "--json"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60).stdout
    return [(_component(r["name"]), int(r["pid"])) for r in json.loads(out or "[]") if r.get("pid")]


def stack_cpu_meter(kind: str) -> Callable[[], float]:
    """A function giving the CPU seconds so far of every running process of the stack's
    ``kind`` ("cassandra", "kafka": a write costs every replica), from /proc; the pids
    are looked up once."""
    pids = [pid for k, pid in stack_pids() if k == kind]
    return lambda: sum(tree_cpu_s(p) for p in pids)


def store_pids() -> dict[str, int]:
    """Pids of the running stack's Postgres and Cassandra (the stores' CPU is shared with
    anything else using them on this machine)."""
    return {kind: pid for kind, pid in stack_pids() if kind in ("postgres", "cassandra")}


class Servers:
    def __init__(self, database: str, log_dir: Path, secrets_env: dict[str, str],
                 workers: int = 1) -> None:
        self._database = database
        self._log_dir = log_dir
        self._secrets_env = secrets_env
        self._workers = workers
        self.started: dict[str, Server] = {}

    def _spawn(self, name: str, port: int, argv: list[str], env: dict[str, str],
               ready_path: str, tree: Path = ROOT) -> Server:
        env = dict(stack_client_env(), FEED_PG_DATABASE=self._database, PYTHONPATH=str(tree),
                   **self._secrets_env, **env)
        log = open(self._log_dir / f"{name}.log", "wb")
        process = subprocess.Popen(argv, cwd=tree, env=env, stdout=log, stderr=subprocess.STDOUT)
        log.close()  # the child holds its own descriptor
        server = Server(name, f"http://127.0.0.1:{port}", process, ready_path)
        self.started[name] = server
        return server

    def start_ours(self, name: str = "ours", tree: Path = ROOT,
                   env: dict[str, str] | None = None) -> Server:
        """Our API; ``tree``: the source tree it runs from (another checkout, for A/B);
        ``env``: settings of its own (``FEED_...``)."""
        port = free_port()
        return self._spawn(name, port, [sys.executable, "-m", "services.api"],
                           {"FEED_CASSANDRA_KEYSPACE": self._database,
                            "FEED_API_WORKERS": str(self._workers),
                            "FEED_API_PORT": str(port), "FEED_TOPIC_PREFIX": self._database,
                            **(env or {})},
                           "/readyz", tree)

    def start_pull(self, shape: str) -> Server:
        port = free_port()
        return self._spawn(f"pull-{shape}", port, [sys.executable, "-m", "bench.read.pull_service",
                                                   "--query", shape, "--port", str(port),
                                                   "--workers", str(self._workers)],
                           {}, "/healthz")

    def wait_ready(self) -> None:
        for server in self.started.values():
            deadline = time.monotonic() + READY_DEADLINE_S
            while True:
                try:
                    with urllib.request.urlopen(server.url + server.ready_path, timeout=2) as r:
                        if r.status == 200:
                            break
                except (urllib.error.URLError, OSError):
                    pass
                if server.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{server.name} did not become ready; see "
                                       f"{self._log_dir / (server.name + '.log')}")
                time.sleep(0.3)

    def __enter__(self) -> "Servers":
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        for server in self.started.values():
            if server.process.poll() is None:
                server.process.terminate()
        for server in self.started.values():
            try:
                server.process.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                server.process.kill()
                server.process.wait(STOP_GRACE_S)
