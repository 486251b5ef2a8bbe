"""Local processes the tests start and wait for: free ports, HTTP readiness, and dropping
a test database together with the replication slots a relay left on it."""
from __future__ import annotations

import socket
import subprocess
import time

import httpx
import psycopg

from services.shared.clients import pg
from services.shared.settings import PostgresSettings

from .waiting import wait_until


def free_port() -> int:
    """A loopback port nobody listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_http(url: str, what: str, procs: list[subprocess.Popen], timeout: float = 90) -> None:
    """Wait until ``url`` answers 200; fail at once if one of ``procs`` (what serves it,
    and what it needs) exits meanwhile."""
    def answers() -> bool:
        for proc in procs:
            assert proc.poll() is None, f"{proc.args} exited with {proc.returncode} while {what} started"
        try:
            return httpx.get(url, timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    wait_until(answers, timeout=timeout, interval=0.3, message=f"{what} to be ready at {url}")


def drop_database_with_slots(settings: PostgresSettings, name: str, deadline_s: float = 60.0) -> None:
    """Drop a test database and the replication slots on it, connected as the configured
    role to ``settings``' database (any database but ``name``). A relay the test stopped can
    take seconds to let go of its slot and its connections on a loaded machine (the
    replication role's sessions cannot be ended by this one): wait for both, with a
    deadline, rather than fail teardown."""
    deadline = time.monotonic() + deadline_s
    with pg.connect(settings, autocommit=True) as conn:
        while True:
            rows = conn.execute("SELECT slot_name, active_pid FROM pg_replication_slots "
                                "WHERE database = %s", (name,)).fetchall()
            if all(pid is None for _, pid in rows) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        for slot, _ in rows:
            conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
        while True:
            try:
                conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
                return
            except (psycopg.errors.InsufficientPrivilege, psycopg.errors.ObjectInUse):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
