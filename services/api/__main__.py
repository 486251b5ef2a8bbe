"""``python -m services.api``: serve the API with uvicorn on FEED_API_HOST:FEED_API_PORT.

``FEED_API_WORKERS`` (``Settings.api_workers``, default 1) processes share the
listening socket.
Each builds its own app through ``worker_app`` (uvicorn imports it by name in every
worker): its own Postgres pool, Snowflake node lease, Cassandra session, caches and
stream consumer. Nothing in a process is the only copy of anything: snapshots live in
Cassandra, stream leases are rows every process counts, and node leases are per process.
uvloop and httptools are used when installed (uvicorn's ``auto``; both are pinned).
"""
from __future__ import annotations

import logging

import uvicorn
from fastapi import FastAPI

from services.common.settings import get_settings

from .app import create_app
from .logs import configure_logging

WORKER_APP = "services.api.__main__:worker_app"


def worker_app() -> FastAPI:
    """The app of one worker process (uvicorn factory): logging set up in that process."""
    configure_logging()
    # uvicorn silenced its access log before calling us; configure_logging re-routed it.
    # RequestContextMiddleware is the access log (5xx always, every request on demand).
    logging.getLogger("uvicorn.access").propagate = False
    return create_app(get_settings())


def main() -> None:
    configure_logging()
    settings = get_settings()
    # uvicorn's access_log off: RequestContextMiddleware is the access log (logs.py).
    if settings.api_workers <= 1:
        uvicorn.run(create_app(settings), host=settings.api_host, port=settings.api_port,
                    log_config=None, access_log=False)
        return
    uvicorn.run(WORKER_APP, factory=True, workers=settings.api_workers,
                host=settings.api_host, port=settings.api_port, log_config=None,
                access_log=False)


if __name__ == "__main__":
    main()
