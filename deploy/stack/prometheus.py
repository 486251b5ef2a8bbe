"""Prometheus (Debian's package) scraping the four services, with the alert rules.

The stack writes its configuration (``.stack/data/prometheus/prometheus.yml``) from the
settings the services read (their ports: ``FEED_API_PORT``, ``FEED_*_METRICS_PORT``), so it
scrapes whatever ``make run`` or ``deploy.services`` started; a service that is not
running is a target that is down (``up == 0``), which the rules watch. The rules are
``deploy/prometheus/rules.yml`` (``promtool`` checks and unit-tests them in ``make test``).
One server whatever the node count: it scrapes the services, not the stores.
"""
from __future__ import annotations

import json
import os
import urllib.request
from collections.abc import Mapping
from pathlib import Path

from .layout import REPO, Layout
from .process import (Daemon, StatusRow, UpReport, ensure_ports_free, spawn, status_row, stop,
                      wait_ready)
from .toolchain import ensure_prometheus

RULES = REPO / "deploy" / "prometheus" / "rules.yml"
SCRAPE_INTERVAL_S = 5
# Scraped series are kept two days: enough to look back at a test run or a demo.
RETENTION = "2d"


def port() -> int:
    return int(os.environ.get("FEED_PROMETHEUS_PORT", "9090"))


def address() -> str:
    return f"127.0.0.1:{port()}"


def targets(counts: Mapping[str, int] | None = None) -> dict[str, str | list[str]]:
    """Job name -> the address(es) its metrics are served on (the services' own
    settings): every fan-out and ranker worker ``deploy.services`` runs (``counts``, else
    ``FEED_FANOUT_WORKERS`` / ``FEED_RANKER_WORKERS``)."""
    from .workers import instances, worker_counts
    from services.shared.settings import Settings

    s = Settings()
    workers = instances(s, worker_counts() if counts is None else counts)
    return {"feed-api": f"127.0.0.1:{s.api_port}", "feed-cdc": f"127.0.0.1:{s.cdc_metrics_port}",
            **{f"feed-{role}": [f"127.0.0.1:{i.port}" for i in workers if i.role == role]
               for role in ("fanout", "ranker")}}


def config(jobs: Mapping[str, str | list[str]], rules: Path = RULES) -> dict[str, object]:
    """The server's configuration (JSON is YAML, so it is written as JSON)."""
    return {
        "global": {"scrape_interval": f"{SCRAPE_INTERVAL_S}s",
                   "evaluation_interval": f"{SCRAPE_INTERVAL_S}s"},
        "rule_files": [str(rules)],
        "scrape_configs": [{"job_name": job, "static_configs": [
                               {"targets": [target] if isinstance(target, str) else list(target)}]}
                           for job, target in jobs.items()],
    }


def _dir(layout: Layout) -> Path:
    return layout.root / "data" / "prometheus"


def daemon(layout: Layout) -> Daemon:
    return Daemon(name="prometheus", pid_file=layout.root / "run" / "prometheus.pid",
                  log_file=layout.logs / "prometheus.log", marker=str(_dir(layout)))


def _ready() -> bool:
    with urllib.request.urlopen(f"http://{address()}/-/ready", timeout=2) as resp:
        return bool(resp.status == 200)


def up(layout: Layout, started: list[Daemon]) -> UpReport:
    d = daemon(layout)
    if d.alive():
        return {"state": "already running"}
    server, _tool = ensure_prometheus(layout.logs / "install.log")
    ensure_ports_free("prometheus", [("127.0.0.1", port())])
    folder = _dir(layout)
    (folder / "tsdb").mkdir(parents=True, exist_ok=True)
    conf = folder / "prometheus.yml"
    conf.write_text(json.dumps(config(targets()), indent=2) + "\n")
    spawn(d, [server, f"--config.file={conf}", f"--storage.tsdb.path={folder / 'tsdb'}",
              f"--storage.tsdb.retention.time={RETENTION}", f"--web.listen-address={address()}",
              "--web.enable-lifecycle"])
    started.append(d)
    waited = wait_ready(d, "prometheus", _ready, timeout=60, log_file=d.log_file)
    return {"state": "started", "seconds": round(waited, 1)}


def refresh(layout: Layout, counts: Mapping[str, int] | None = None) -> bool:
    """Write the configuration again for these worker counts and have a running server
    reload it (``--web.enable-lifecycle``); True when it changed. ``deploy.services``
    calls it after starting workers."""
    conf = _dir(layout) / "prometheus.yml"
    text = json.dumps(config(targets(counts)), indent=2) + "\n"
    if not daemon(layout).alive() or (conf.exists() and conf.read_text() == text):
        return False
    conf.write_text(text)
    request = urllib.request.Request(f"http://{address()}/-/reload", method="POST")
    with urllib.request.urlopen(request, timeout=10) as resp:
        return bool(resp.status == 200)


def down(layout: Layout) -> bool:
    return stop(daemon(layout), grace=10)


def status(layout: Layout) -> list[StatusRow]:
    return [status_row(daemon(layout), address())]
