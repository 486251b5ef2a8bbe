"""``python -m services.ranker``: run the ranker worker (metrics on ranker_metrics_port)."""
from __future__ import annotations

import logging

import faust
from prometheus_client import start_http_server

from services.common.settings import get_settings

from .app import create_app


def main() -> None:
    settings = get_settings()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    start_http_server(settings.ranker_metrics_port, addr="127.0.0.1")
    app = create_app(settings)
    faust.Worker(app, loglevel="INFO").execute_from_commandline()


if __name__ == "__main__":
    main()
