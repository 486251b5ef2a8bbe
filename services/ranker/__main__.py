"""``python -m services.ranker``: run the ranker worker (metrics on ranker_metrics_port)."""
from __future__ import annotations

from services.shared.settings import RankerProcess
from services.shared.worker.faust_app import run_worker

from .app import create_app


def main() -> None:
    run_worker(RankerProcess, create_app, lambda settings: settings.ranker_metrics_port)


if __name__ == "__main__":
    main()
