"""``python -m services.api``: serve the API with uvicorn on FEED_API_HOST:FEED_API_PORT.

``FEED_API_WORKERS`` (``Settings.api_workers``; 0, the default, means one per core
this process may run on) processes share the listening socket.
Each builds its own app through ``worker_app`` (uvicorn imports it by name in every
worker): its own Postgres pool, Snowflake node lease, Cassandra session, caches and
stream consumer. Nothing in a process is the only copy of anything: snapshots live in
Cassandra, stream leases are rows every process counts, and node leases are per process.
uvloop is used when installed (uvicorn's ``auto``; pinned); HTTP/1.1 is httptools' parser
with a response's writes sent as one (``http/one_write.py``).
"""
from __future__ import annotations

import logging
import os

import uvicorn
from fastapi import FastAPI

from services.api.http.logs import configure_logging
from services.shared.clients.preflight import preflight
from services.shared.parent_death import die_with
from services.shared.secret_policy import UnsafeSecrets, require_safe_secrets
from services.shared.settings import ApiProcess, load

from .app import create_app
from .http.one_write import PROTOCOL

WORKER_APP = "services.api.__main__:worker_app"
# The master's pid, for its workers: each dies with it (services/shared/parent_death.py).
MASTER_ENV = "FEED_API_MASTER_PID"


def worker_count(configured: int, usable_cores: int | None) -> int:
    """The worker processes to run: ``configured`` when positive, else one per core.

    ``usable_cores`` is None when the platform cannot tell; then one worker.
    """
    if configured > 0:
        return configured
    return max(1, usable_cores or 1)


def usable_cores() -> int | None:
    """Cores this process may run on: its CPU affinity (a cpuset, taskset) where the
    platform has one, else every core of the machine."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count()


def worker_app() -> FastAPI:
    """The app of one worker process (uvicorn factory): logging set up in that process.
    The worker is killed when its master exits, however it exits."""
    master = os.environ.get(MASTER_ENV)
    if master:
        die_with(int(master))
    settings = load(ApiProcess)
    configure_logging(access_log=settings.api_access_log)
    # uvicorn silenced its access log before calling us; configure_logging re-routed it.
    # edge.Edge is the access log (5xx always, every request on demand).
    logging.getLogger("uvicorn.access").propagate = False
    return create_app(settings)


def main() -> None:
    settings = load(ApiProcess)
    try:
        # Also checked in the app's lifespan; here it is one clear line, before uvicorn
        # starts any worker, instead of a traceback per worker.
        require_safe_secrets(settings)
    except UnsafeSecrets as exc:
        raise SystemExit(f"services.api: {exc}") from None
    configure_logging(access_log=settings.api_access_log)
    # Once, in this process, before uvicorn forks its workers: a store that refuses our
    # credentials or TLS ends the API in one line (status 78), not a traceback per worker.
    preflight(settings, ("postgres", "kafka", "cassandra"))
    workers = worker_count(settings.api_workers, usable_cores())
    # uvicorn's access_log off: edge.Edge is the access log (logs.py).
    if workers == 1:
        uvicorn.run(create_app(settings), host=settings.api_host, port=settings.api_port,
                    log_config=None, access_log=False, http=PROTOCOL)
        return
    os.environ[MASTER_ENV] = str(os.getpid())   # inherited by the workers uvicorn spawns
    uvicorn.run(WORKER_APP, factory=True, workers=workers,
                host=settings.api_host, port=settings.api_port, log_config=None,
                access_log=False, http=PROTOCOL)


if __name__ == "__main__":
    main()
