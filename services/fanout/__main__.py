"""``python -m services.fanout``: run the fan-out worker (metrics on fanout_metrics_port)."""
from __future__ import annotations

from services.shared.settings import FanoutProcess
from services.shared.worker.faust_app import run_worker

from .app import create_app


def main() -> None:
    run_worker(FanoutProcess, create_app, lambda settings: settings.fanout_metrics_port)


if __name__ == "__main__":
    main()
