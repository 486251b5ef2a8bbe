"""Integration fixtures for the HTTP API: the real app under uvicorn on a free port.

``api_server`` (session scope) serves ``create_app(settings)`` on the session's fresh
database in a background thread and stops it at the end; tests talk to it over real HTTP
with httpx. ``api_server.client(user_id)`` is an httpx client carrying a valid token.
The read path's tests reuse the same fixture; ``world`` seeds their serving store, and
``worker_env`` runs the fan-out and ranker as subprocesses (tests/support/).
"""
from __future__ import annotations

import secrets
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import psycopg
import pytest
import uvicorn
from fastapi import FastAPI

from services.api.app import create_app
from services.api.auth import MODERATOR_ROLE, mint_token
from services.common.settings import Settings
from tests.support.feed_world import FeedWorld
from tests.support.waiting import wait_until
from tests.support.worker_env import WorkerEnv, open_worker_env


STARTUP_DEADLINE_S = 60.0


def free_port() -> int:
    """A loopback port nobody listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_http(url: str, what: str, procs: list[subprocess.Popen], timeout: float = 90) -> None:
    """Wait until ``url`` answers 200; fail at once if one of ``procs`` (what serves it,
    and what it needs) exits meanwhile."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for proc in procs:
            assert proc.poll() is None, f"{proc.args} exited with {proc.returncode} while {what} started"
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise AssertionError(f"{what} not ready at {url} after {timeout:.0f}s")


def drop_database_with_slots(admin_dsn: str, name: str, deadline_s: float = 60.0) -> None:
    """Drop a test database and the replication slots on it. A relay the test stopped can
    take seconds to let go of its slot and its connections on a loaded machine (the
    replication role's sessions cannot be ended by this one): wait for both, with a
    deadline, rather than fail teardown."""
    deadline = time.monotonic() + deadline_s
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
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


def new_user_id() -> int:
    """A user id no other test uses (random 62-bit)."""
    return secrets.randbelow(1 << 62) + 1


@dataclass
class RunningApi:
    """A served app: its address, settings and the app object (for ``app.state``)."""

    base_url: str
    settings: Settings
    app: FastAPI

    def token(self, user_id: int, *, moderator: bool = False, ttl_seconds: int = 3600) -> str:
        roles = (MODERATOR_ROLE,) if moderator else ()
        return mint_token(user_id, self.settings.jwt_secret.get_secret_value(), roles=roles,
                          ttl_seconds=ttl_seconds)

    def client(self, user_id: int | None = None, *, moderator: bool = False,
               timeout: float = 30.0) -> httpx.Client:
        """An httpx client for the API; authenticated as ``user_id`` when given."""
        headers = {}
        if user_id is not None:
            headers["Authorization"] = f"Bearer {self.token(user_id, moderator=moderator)}"
        return httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout)


class _ThreadedServer(uvicorn.Server):
    def install_signal_handlers(self) -> None:  # not the main thread
        pass


def serve_in_thread(app: FastAPI) -> tuple[_ThreadedServer, threading.Thread, str]:
    """Start uvicorn for ``app`` on a free loopback port; return it once it accepts."""
    server = _ThreadedServer(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning",
                                            access_log=False, lifespan="on"))
    thread = threading.Thread(target=server.run, name="api-server", daemon=True)
    thread.start()
    wait_until(lambda: server.started or not thread.is_alive(), timeout=STARTUP_DEADLINE_S,
               message="the API to start")
    if not server.started:
        raise RuntimeError("the API did not start (see the log above)")
    port = server.servers[0].sockets[0].getsockname()[1]
    return server, thread, f"http://127.0.0.1:{port}"


def stop_server(server: _ThreadedServer, thread: threading.Thread) -> None:
    server.should_exit = True
    thread.join(timeout=30)


# Module scope: some modules restart Postgres on purpose; a fresh server per module keeps
# one module's outage (and the pool's reconnect back-off) out of the next module.
@contextmanager
def running_api(settings: Settings) -> Iterator[RunningApi]:
    """The API app on ``settings``, served in a thread until the block ends."""
    app = create_app(settings)
    server, thread, base_url = serve_in_thread(app)
    try:
        yield RunningApi(base_url=base_url, settings=settings, app=app)
    finally:
        stop_server(server, thread)


@pytest.fixture(scope="module")
def api_server(settings: Settings) -> Iterator[RunningApi]:
    with running_api(settings) as api:
        yield api


@pytest.fixture(scope="module")
def world(settings: Settings, api_server: RunningApi) -> Iterator[FeedWorld]:
    """A ``FeedWorld`` on the session's stores, whose writes ``api_server`` has seen
    (its serving cache applied their notices) before the next request."""
    w = FeedWorld(settings)
    w.watchers.append(api_server)
    yield w
    w.close()


@pytest.fixture
def worker_env(settings: Settings, tmp_path: Path) -> Iterator[WorkerEnv]:
    yield from open_worker_env(settings, tmp_path)
