"""The whole system as ``make run`` starts it, for the end-to-end tests.

The four services run as separate processes, each under ``deploy.supervise`` (restarted
when it dies, as ``make run`` runs them), on this module's own database, keyspace, topic
prefix and free ports, so nothing else in the session shares their data or offsets.
Tests talk to the API over HTTP only; they read Cassandra directly only to prove where a
post was stored (an inbox row, or none for a celebrity). Two settings differ from the
defaults, both to make tiering reachable with a handful of users: the fan-out capacity is
pinned at ``CAPACITY_ROWS_PER_S`` (an author with ``CELEBRITY_FOLLOWERS`` followers costs
more than the freshness budget allows, so is promoted) and tiers change without dwell.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from services.api.http.auth import MODERATOR_ROLE, mint_token
from services.shared.settings import Settings
from services.shared.clients import cql, pg
from tests.support.api_server import new_user_id
from tests.support.feed_world import feed_ids, walk
from tests.support.processes import drop_database_with_slots, free_port, wait_for_http

REPO = Path(__file__).resolve().parents[2]
SERVICES = ("cdc", "fanout", "ranker", "api")
# Promotion when one post's fan-out takes > tier_promote_share (0.5) x freshness (1.5 s):
# at 4 rows/s, 4 followers (1 s) make a celebrity and 1-2 followers (<= 0.5 s) do not.
CAPACITY_ROWS_PER_S = 4
CELEBRITY_FOLLOWERS = 4
# Inactive readers (services/fanout/inactive.py) on a clock the tests can wait for: a
# reader is inactive after this many seconds without a read (1 s periods), the sweeper
# looks every second. Longer than any other test leaves a reader without a read while
# still expecting rows.
INACTIVE_AFTER_S = 40
START_DEADLINE_S = 120
# Commit to visible takes well under a second on a quiet stack; a shared 2-core machine
# (and a restarting worker) can take far longer, so waits are generous and measured.
VISIBLE_S = 60


@dataclass
class System:
    settings: Settings
    api: str
    logs: Path
    supervisors: dict[str, subprocess.Popen] = field(default_factory=dict)
    _session: Any = None

    def session(self) -> Any:
        """One Cassandra session on the system's keyspace, for the tests' direct reads."""
        if self._session is None:
            self._session = cql.session(self.settings)
        return self._session

    def client(self, user_id: int | None = None, *, moderator: bool = False) -> httpx.Client:
        headers = {}
        if user_id is not None:
            roles = (MODERATOR_ROLE,) if moderator else ()
            token = mint_token(user_id, self.settings.jwt_secret.get_secret_value(), roles=roles)
            headers["Authorization"] = f"Bearer {token}"
        return httpx.Client(base_url=self.api, headers=headers, timeout=30)

    def service_pid(self, name: str) -> int | None:
        """The pid of the service process its supervisor runs now (None: between runs)."""
        sup = self.supervisors[name].pid
        children = Path(f"/proc/{sup}/task/{sup}/children").read_text().split()
        return int(children[0]) if children else None

    def kill(self, name: str) -> int:
        """SIGKILL the service (its supervisor restarts it); returns the killed pid."""
        pid = self.service_pid(name)
        assert pid is not None, f"{name} is not running"
        os.kill(pid, signal.SIGKILL)
        return pid


def post(client: httpx.Client, text: str) -> int:
    """A new post through the API; its id."""
    r = client.post("/v1/posts", json={"text": text}, headers={"Idempotency-Key": uuid.uuid4().hex})
    assert r.status_code == 201, r.text
    return int(r.json()["post_id"])


def feed(client: httpx.Client, **params: Any) -> list[int]:
    """Every post id of the caller's feed, walking all its pages."""
    return [pid for page in walk(client, 50, params=params) for pid in feed_ids(page)]


def new_users(system: System, count: int) -> list[int]:
    """New users: a user exists from its first authenticated request."""
    users = [new_user_id() for _ in range(count)]
    for user in users:
        with system.client(user) as c:
            assert c.get("/v1/me/preferences").status_code == 200
    return users


def follow_authors(system: System, reader: int, authors: list[int]) -> None:
    with system.client(reader) as c:
        for author in authors:
            r = c.put(f"/v1/users/{author}/follow")
            assert r.status_code == 200, r.text


def inbox_post_ids(system: System, reader: int) -> list[int]:
    """The reader's inbox rows, read from Cassandra (to prove where a post was stored)."""
    return [r.post_id for r in system.session().execute(
        "SELECT post_id FROM feed_inbox WHERE reader_id = %s", (reader,))]


def _tail(path: Path, size: int = 3000) -> str:
    return path.read_bytes()[-size:].decode("utf-8", "replace") if path.exists() else ""


@pytest.fixture(scope="session")
def system(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    from deploy.migrate import migrate_cassandra, migrate_kafka, migrate_postgres

    name = f"{settings.pg_database}_e2e_{uuid.uuid4().hex[:4]}"
    with pg.connect(settings, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    ports = {"api_port": free_port(), "cdc_metrics_port": free_port(),
             "fanout_metrics_port": free_port(), "ranker_metrics_port": free_port()}
    s = settings.model_copy(update={"pg_database": name, "cassandra_keyspace": name,
                                    "topic_prefix": name, **ports})
    migrate_postgres(s)
    migrate_cassandra(s, name)
    migrate_kafka(s, name)
    logs = tmp_path_factory.mktemp("e2e-logs")  # printed (tails) at the end of the session
    env = {**os.environ, "FEED_DEV_MODE": "true", "FEED_API_WORKERS": "1",
           "FEED_PG_DATABASE": name, "FEED_CASSANDRA_KEYSPACE": name, "FEED_TOPIC_PREFIX": name,
           "FEED_FANOUT_CAPACITY_PINNED_ROWS_PER_S": str(CAPACITY_ROWS_PER_S),
           "FEED_TIER_MIN_DWELL_S": "0", "FEED_CDC_HEARTBEAT_INTERVAL_S": "1",
           "FEED_INACTIVE_AFTER": f"PT{INACTIVE_AFTER_S}S", "FEED_ACTIVITY_RESOLUTION": "PT1S",
           "FEED_INACTIVE_SWEEP_EVERY_S": "1",
           **{f"FEED_{k.upper()}": str(v) for k, v in ports.items()}}
    system = System(s, f"http://127.0.0.1:{s.api_port}", logs)
    try:
        for svc in SERVICES:
            with open(logs / f"{svc}.log", "wb") as log:
                system.supervisors[svc] = subprocess.Popen(
                    [sys.executable, "-m", "deploy.supervise", f"services.{svc}"], cwd=REPO, env=env,
                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        procs = list(system.supervisors.values())
        for svc, port in (("cdc", s.cdc_metrics_port), ("fanout", s.fanout_metrics_port),
                          ("ranker", s.ranker_metrics_port)):
            wait_for_http(f"http://127.0.0.1:{port}/metrics", svc, procs, START_DEADLINE_S)
        wait_for_http(f"{system.api}/readyz", "api", procs, START_DEADLINE_S)
        yield system
    finally:
        for proc in system.supervisors.values():
            if proc.poll() is None:
                proc.terminate()  # the supervisor passes it on to its service and exits
        for proc in system.supervisors.values():
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        if system._session is not None:
            system._session.cluster.shutdown()
        for svc in SERVICES:
            print(f"--- {svc}.log (tail)\n{_tail(logs / f'{svc}.log')}")
        drop_database_with_slots(settings, name)
        try:
            cluster = cql.cluster(s, timeout=60)
            cluster.connect().execute(f"DROP KEYSPACE IF EXISTS {name}")
            cluster.shutdown()
        except Exception:  # noqa: BLE001 - best-effort clean-up, like the session's own
            pass
