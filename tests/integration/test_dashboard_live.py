"""The dashboard and the alert rules against a real Prometheus scraping a running system.

The four services run as processes on this test's database, topics and free ports (the
API with one worker); a Prometheus server (Debian's binary, the one the stack runs) scrapes
them every second with ``deploy/prometheus/rules.yml`` loaded, and the running stack's
store exporters too (deploy/stack/exporters.py: the JMX exporter in each Kafka and
Cassandra process, the postgres exporter; ``make up`` starts them). Traffic goes through
the API: users follow, post, like and page. Then every PromQL target of every panel of
``deploy/grafana/feed-pipeline.json`` must return data (a sample that is a number, not
an empty result or NaN), and every recording and alert rule must evaluate without error.
"""
from __future__ import annotations

import itertools
import json
import math
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from deploy.stack import exporters
from deploy.stack.layout import Layout
from deploy.stack.prometheus import RULES, config
from services.api.http.auth import mint_token
from services.shared.clients import pg
from services.shared.settings import Settings
from tests.conftest import require_tool
from tests.support.api_server import new_user_id
from tests.support.processes import drop_database_with_slots, free_port, wait_for_http
from tests.support.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "deploy" / "grafana" / "feed-pipeline.json"
SERVICES = {"feed-cdc": "services.cdc", "feed-fanout": "services.fanout",
            "feed-ranker": "services.ranker", "feed-api": "services.api"}
PANELS_DEADLINE_S = 180
TRAFFIC_S = 20
_counter = itertools.count(1)


@dataclass
class LiveSystem:
    settings: Settings
    api: str
    prometheus: str
    logs: Path
    # The stack's store exporters scraped: job -> addresses.
    stores: dict[str, list[str]]


@pytest.fixture
def live(settings: Settings, tmp_path: Path) -> Iterator[LiveSystem]:
    from deploy.migrate import migrate_kafka, migrate_postgres

    server = require_tool("prometheus", "Debian's package; `make up` installs it")
    name = f"{settings.pg_database}_dash{next(_counter)}"
    with pg.connect(settings, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    ports = {"api_port": free_port(), "cdc_metrics_port": free_port(),
             "fanout_metrics_port": free_port(), "ranker_metrics_port": free_port()}
    s = settings.model_copy(update={"pg_database": name, "topic_prefix": name, **ports})
    migrate_postgres(s)
    migrate_kafka(s, name)
    env = {**os.environ, "FEED_DEV_MODE": "true", "FEED_API_WORKERS": "1",
           "FEED_PG_DATABASE": name, "FEED_TOPIC_PREFIX": name,
           "FEED_CASSANDRA_KEYSPACE": s.cassandra_keyspace,
           "FEED_CDC_HEARTBEAT_INTERVAL_S": "1", "FEED_KAFKA_COMMIT_INTERVAL_S": "0.5",
           **{f"FEED_{k.upper()}": str(v) for k, v in ports.items()}}
    procs: list[subprocess.Popen] = []
    prom_port = free_port()
    jobs = {"feed-api": f"127.0.0.1:{s.api_port}", "feed-cdc": f"127.0.0.1:{s.cdc_metrics_port}",
            "feed-fanout": f"127.0.0.1:{s.fanout_metrics_port}",
            "feed-ranker": f"127.0.0.1:{s.ranker_metrics_port}"}
    stores = exporters.targets(Layout.from_env())
    conf = config({**jobs, **stores}, RULES, exporters.scrape_params())
    conf["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
    (tmp_path / "prometheus.yml").write_text(json.dumps(conf))
    try:
        for job, module in SERVICES.items():
            log = open(tmp_path / f"{job}.log", "wb")
            procs.append(subprocess.Popen([sys.executable, "-m", module], cwd=REPO, env=env,
                                          stdout=log, stderr=subprocess.STDOUT))
        log = open(tmp_path / "prometheus.log", "wb")
        procs.append(subprocess.Popen(
            [server, f"--config.file={tmp_path / 'prometheus.yml'}",
             f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{prom_port}"],
            stdout=log, stderr=subprocess.STDOUT))
        api = f"http://127.0.0.1:{s.api_port}"
        wait_for_http(f"{api}/healthz", "the API", procs)
        wait_for_http(f"http://127.0.0.1:{prom_port}/-/ready", "prometheus", procs)
        yield LiveSystem(s, api, f"http://127.0.0.1:{prom_port}", tmp_path, stores)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        for log in sorted(tmp_path.glob("*.log")):
            print(f"--- {log.name} (tail)\n{log.read_bytes()[-2000:].decode('utf-8', 'replace')}")
        drop_database_with_slots(settings, name)


def _traffic(system: LiveSystem) -> None:
    """Users follow, post, like and page through the API, as the product is used."""
    secret = system.settings.jwt_secret.get_secret_value()
    authors, readers = [new_user_id() for _ in range(3)], [new_user_id() for _ in range(6)]

    def client(user: int) -> httpx.Client:
        return httpx.Client(base_url=system.api, timeout=10,
                            headers={"Authorization": f"Bearer {mint_token(user, secret)}"})

    clients = {u: client(u) for u in authors + readers}
    try:
        for user in authors + readers:  # the first authenticated request creates the user
            assert clients[user].get("/v1/feed", params={"limit": 1}).status_code == 200
        for reader in readers:
            for author in authors:
                assert clients[reader].put(f"/v1/users/{author}/follow").status_code in (200, 201, 204)
        # Spread over TRAFFIC_S, so that every rate() sees increases between scrapes: a
        # post, a like and a page per reader each second.
        for i in range(TRAFFIC_S):
            started = time.monotonic()
            author = authors[i % len(authors)]
            r = clients[author].post("/v1/posts", json={"text": f"dashboard check {i}"},
                                     headers={"Idempotency-Key": uuid.uuid4().hex})
            assert r.status_code == 201, r.text
            post = int(r.json()["post_id"])
            assert clients[readers[i % len(readers)]].put(f"/v1/posts/{post}/like").status_code == 204
            for reader in readers:
                assert clients[reader].get("/v1/feed", params={"limit": 5}).status_code == 200
            time.sleep(max(0.0, 1.0 - (time.monotonic() - started)))

        def first_pages() -> list[httpx.Response] | None:  # once the posts reached the feeds
            pages = [clients[r].get("/v1/feed", params={"limit": 5}) for r in readers]
            return pages if all(p.status_code == 200 and p.json()["items"] for p in pages) else None

        pages = wait_until(first_pages, timeout=60, interval=0.5,
                           message="the posts to reach the readers' feeds")
        for reader, page in zip(readers, pages):
            if page.json().get("next_cursor"):
                clients[reader].get("/v1/feed", params={"limit": 5,
                                                        "cursor": page.json()["next_cursor"]})
    finally:
        for c in clients.values():
            c.close()


def _numbers(prometheus: str, expr: str) -> list[float]:
    r = httpx.get(f"{prometheus}/api/v1/query", params={"query": expr}, timeout=10)
    assert r.status_code == 200, f"{expr}: {r.text}"
    body = r.json()["data"]
    values = [float(v["value"][1]) for v in body["result"]] if body["resultType"] == "vector" else []
    return [v for v in values if not math.isnan(v)]


def test_every_panel_shows_data_and_every_rule_evaluates(live: LiveSystem) -> None:
    # Every service scraped before the traffic starts: a series first seen with its final
    # value has no increase for rate() to see.
    wait_until(lambda: len(_numbers(live.prometheus, 'up{job=~"feed-.*"} == 1')) == len(SERVICES),
               timeout=120, interval=1, message="every service to be scraped")
    assert len(_numbers(live.prometheus, 'up{job=~"feed-.*"} == 1')) == len(SERVICES)
    # And every exporter of the stack's stores.
    store_jobs = "|".join(live.stores)
    expected = sum(len(addresses) for addresses in live.stores.values())
    wait_until(lambda: len(_numbers(live.prometheus, f'up{{job=~"{store_jobs}"}} == 1')) == expected,
               timeout=60, interval=1,
               message=f"every store exporter to be scraped ({live.stores}; a stack started before "
                       "the exporters existed has none: `make down` then `make up`)")
    _traffic(live)
    panels = json.loads(DASHBOARD.read_text())["panels"]
    exprs = {t["expr"]: p["title"] for p in panels for t in p["targets"]}
    missing: dict[str, str] = dict(exprs)
    deadline = time.monotonic() + PANELS_DEADLINE_S
    while missing and time.monotonic() < deadline:
        for expr in list(missing):
            if _numbers(live.prometheus, expr):
                del missing[expr]
        if missing:
            time.sleep(2)
    if missing:  # what Prometheus holds, to tell a dead target from a quiet series
        targets = httpx.get(f"{live.prometheus}/api/v1/targets", timeout=10).json()["data"]
        print({t["labels"]["job"]: (t["health"], t["lastError"]) for t in targets["activeTargets"]})
        for expr in missing:
            inner = expr.split("(rate(", 1)[-1].split("[", 1)[0]
            for q in (f"count({inner})", f"sum({inner.replace('_bucket', '_count')})",
                      f"sum(rate({inner.replace('_bucket', '_count')}[5m]))",
                      f"{inner.replace('_bucket', '_count')}[3m]"):
                print(q, "->", httpx.get(f"{live.prometheus}/api/v1/query", params={"query": q},
                                         timeout=10).json()["data"]["result"])
    assert not missing, f"panels without data: {missing}"
    # Every target is up, and every rule evaluated against these series without error.
    up = {int(v) for v in _numbers(live.prometheus, 'up{job=~"feed-.*"}')}
    assert up == {1}, _numbers(live.prometheus, "up")
    stores_up = _numbers(live.prometheus, f'up{{job=~"{store_jobs}"}}')
    assert stores_up == [1.0] * expected, stores_up
    assert _numbers(live.prometheus, "pg_up") == [1.0]
    groups = httpx.get(f"{live.prometheus}/api/v1/rules", timeout=10).json()["data"]["groups"]
    rules = [r for g in groups for r in g["rules"]]
    assert rules and all(r["health"] == "ok" for r in rules), \
        [(r["name"], r.get("lastError")) for r in rules if r["health"] != "ok"]
    # The SLO recording rules have data from this traffic (the pages, the fan-out).
    for record in ("feed:page_errors:ratio_rate5m", "feed:freshness_bad:ratio_rate5m",
                   "feed:page_latency_seconds:p95_rate5m"):
        assert _numbers(live.prometheus, record), record
