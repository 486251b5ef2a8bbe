"""Prometheus (Debian's package) scraping the four services and the stores' exporters,
with the alert rules.

The stack writes its configuration (``.stack/data/prometheus/prometheus.yml``) from the
settings the services read (their ports: ``FEED_API_PORT``, ``FEED_*_METRICS_PORT``), so it
scrapes whatever ``make run`` or ``deploy.services`` started; a service that is not
running is a target that is down (``up == 0``), which the rules watch. It also scrapes
the stores' exporters of the layout it is started with (exporters.py: jobs
``kafka-jmx``, on three nodes ``kafka-controller-jmx``, ``cassandra-jmx``, ``postgres``;
one target per process, each on its node's address). The rules are
``deploy/prometheus/rules.yml`` (``promtool`` checks and unit-tests them in ``make test``).
One server whatever the node count.
"""
from __future__ import annotations

import json
import os
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path

from . import exporters
from .layout import REPO, Layout
from .process import (Daemon, StackError, StatusRow, UpReport, ensure_ports_free, spawn, status_row,
                      stop, wait_ready)
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


def config(jobs: Mapping[str, str | Sequence[str]], rules: Path = RULES,
           params: Mapping[str, Mapping[str, list[str]]] | None = None) -> dict[str, object]:
    """The server's configuration (JSON is YAML, so it is written as JSON): a job per
    entry of ``jobs``, scraping its address or addresses, with the query ``params`` of
    its scrapes where given (exporters.scrape_params)."""
    def job(name: str, target: str | Sequence[str]) -> dict[str, object]:
        out: dict[str, object] = {"job_name": name, "static_configs": [
            {"targets": [target] if isinstance(target, str) else list(target)}]}
        if params and name in params:
            out["params"] = dict(params[name])
        return out

    return {
        "global": {"scrape_interval": f"{SCRAPE_INTERVAL_S}s",
                   "evaluation_interval": f"{SCRAPE_INTERVAL_S}s"},
        "rule_files": [str(rules)],
        "scrape_configs": [job(name, target) for name, target in jobs.items()],
    }


def _dir(layout: Layout) -> Path:
    return layout.root / "data" / "prometheus"


def daemon(layout: Layout) -> Daemon:
    return Daemon(name="prometheus", pid_file=layout.root / "run" / "prometheus.pid",
                  log_file=layout.logs / "prometheus.log", marker=str(_dir(layout)))


def _ready() -> bool:
    with urllib.request.urlopen(f"http://{address()}/-/ready", timeout=2) as resp:
        return bool(resp.status == 200)


def _reload(d: Daemon) -> None:
    req = urllib.request.Request(f"http://{address()}/-/reload", method="POST")
    try:
        with urllib.request.urlopen(req, timeout=10):
            pass
    except OSError as exc:
        raise StackError(f"prometheus: reloading its configuration failed ({exc}); see {d.log_file}") from None


def up(layout: Layout, started: list[Daemon]) -> UpReport:
    d = daemon(layout)
    folder = _dir(layout)
    conf = folder / "prometheus.yml"
    text = _text(layout)
    if d.alive():
        # A server started by an older checkout (or with other service ports) scrapes
        # what its configuration said then: write this one and reload it in place.
        if not conf.is_file() or conf.read_text() != text:
            conf.write_text(text)
            _reload(d)
            return {"state": "already running (configuration reloaded)"}
        return {"state": "already running"}
    server, _tool = ensure_prometheus(layout.logs / "install.log")
    ensure_ports_free("prometheus", [("127.0.0.1", port())])
    (folder / "tsdb").mkdir(parents=True, exist_ok=True)
    conf.write_text(text)
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
    text = _text(layout, counts)
    d = daemon(layout)
    if not d.alive() or (conf.exists() and conf.read_text() == text):
        return False
    conf.write_text(text)
    _reload(d)
    return True


def _text(layout: Layout, counts: Mapping[str, int] | None = None) -> str:
    """The configuration file's text: the services' jobs (``counts`` workers of each
    role) and the stores' exporters, with the exporters' scrape parameters."""
    return json.dumps(config({**targets(counts), **exporters.targets(layout)}, RULES,
                             exporters.scrape_params()), indent=2) + "\n"


def down(layout: Layout) -> bool:
    return stop(daemon(layout), grace=10)


def status(layout: Layout) -> list[StatusRow]:
    return [status_row(daemon(layout), address())]
