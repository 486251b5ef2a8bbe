"""The real API app served by uvicorn in a thread, on a free loopback port, with the
HTTP protocol ``python -m services.api`` serves with: what the integration tests talk to
over HTTP (``running_api``, ``RunningApi.client``)."""
from __future__ import annotations

import secrets
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import httpx
import uvicorn
from fastapi import FastAPI

from services.api.app import create_app
from services.api.http.auth import MODERATOR_ROLE, mint_token
from services.api.http.one_write import PROTOCOL
from services.shared.settings import Settings
from tests.support.waiting import wait_until

STARTUP_DEADLINE_S = 60.0


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
                                            access_log=False, lifespan="on", http=PROTOCOL))
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


@contextmanager
def running_api(settings: Settings) -> Iterator[RunningApi]:
    """The API app on ``settings``, served in a thread until the block ends."""
    app = create_app(settings)
    server, thread, base_url = serve_in_thread(app)
    try:
        yield RunningApi(base_url=base_url, settings=settings, app=app)
    finally:
        stop_server(server, thread)
