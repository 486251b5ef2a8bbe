"""Node-id leases in Postgres and id uniqueness across threads and processes."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from services.api.write.idgen import LEASE_SAFETY_MS, LeaseLost, NodeLease, SnowflakeGenerator
from services.shared.clients import pg
from services.shared.domain import ids

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]

_WORKER = textwrap.dedent("""
    import sys
    from services.api.write.idgen import NodeLease, SnowflakeGenerator
    from services.shared.settings import Settings
    lease = NodeLease.acquire(Settings())
    try:
        gen = SnowflakeGenerator(lease.node_id, lease=lease)
        with open(sys.argv[1], "w") as out:
            out.write("\\n".join(str(gen.next_id()) for _ in range(int(sys.argv[2]))))
    finally:
        lease.release()
""")


def test_live_leases_never_share_a_node_id(settings) -> None:
    leases = [NodeLease.acquire(settings) for _ in range(5)]
    try:
        assert len({lease.node_id for lease in leases}) == 5
        with pg.connect(settings) as conn:
            rows = conn.execute("SELECT node_id, holder FROM id_node_leases "
                                "WHERE expires_at > now()").fetchall()
        held = {(lease.node_id, lease.holder) for lease in leases}
        assert held <= set(rows)
    finally:
        for lease in leases:
            lease.release()


def test_lease_taken_by_another_holder_stops_the_generator(settings) -> None:
    lease = NodeLease.acquire(settings)
    try:
        gen = SnowflakeGenerator(lease.node_id, lease=lease)
        gen.next_id()
        with pg.connect(settings) as conn:
            conn.execute("UPDATE id_node_leases SET holder = 'someone-else' WHERE node_id = %s",
                         (lease.node_id,))
        assert lease.renew() is False
        with pytest.raises(LeaseLost):
            gen.next_id()
    finally:
        lease.release()


def test_expired_lease_cannot_be_renewed(settings) -> None:
    lease = NodeLease.acquire(settings)
    try:
        with pg.connect(settings) as conn:
            conn.execute("UPDATE id_node_leases SET expires_at = now() - interval '1 second' "
                         "WHERE node_id = %s", (lease.node_id,))
        assert lease.renew() is False
        assert not lease.is_held()
    finally:
        lease.release()


def test_unrenewed_lease_stops_issuing_before_it_expires_in_postgres(settings) -> None:
    now = [1000.0]
    lease = NodeLease.acquire(settings, ttl_seconds=10, monotonic=lambda: now[0])
    try:
        gen = SnowflakeGenerator(lease.node_id, lease=lease)
        gen.next_id()
        now[0] += 10 - LEASE_SAFETY_MS / 1000 - 0.001
        gen.next_id()
        now[0] += 0.002
        with pytest.raises(LeaseLost):
            gen.next_id()
        assert lease.renew() is True  # still ours in Postgres: renewal brings it back
        gen.next_id()
    finally:
        lease.release()


def test_ids_are_unique_across_processes(settings, tmp_path: Path) -> None:
    env = {**os.environ, "FEED_PG_DATABASE": settings.pg_database, "PYTHONPATH": str(ROOT)}
    per_process = 50_000
    outputs = [tmp_path / f"ids-{i}.txt" for i in range(4)]
    workers = [subprocess.Popen([sys.executable, "-c", _WORKER, str(out), str(per_process)],
                                cwd=ROOT, env=env) for out in outputs]
    for worker in workers:
        assert worker.wait(timeout=120) == 0
    issued = [[int(line) for line in out.read_text().split()] for out in outputs]
    everything = [i for batch in issued for i in batch]
    assert len(everything) == 4 * per_process
    assert len(set(everything)) == len(everything)
    nodes = [{ids.parse(i).node for i in batch} for batch in issued]
    assert all(len(n) == 1 for n in nodes) and len(set().union(*nodes)) == 4
    assert all(batch == sorted(batch) for batch in issued)


def test_instance_that_lost_its_lease_refuses_posts_and_is_not_ready(settings) -> None:
    from services.api.app import create_app
    from tests.support.api_server import RunningApi, new_user_id, serve_in_thread, stop_server

    app = create_app(settings)
    server, thread, base_url = serve_in_thread(app)
    try:
        api = RunningApi(base_url=base_url, settings=settings, app=app)
        lease = app.state.id_lease
        with pg.connect(settings) as conn:
            conn.execute("UPDATE id_node_leases SET holder = 'someone-else' WHERE node_id = %s",
                         (lease.node_id,))
        assert lease.renew() is False
        with api.client(new_user_id()) as http:
            refused = http.post("/v1/posts", json={"text": "x"},
                                headers={"Idempotency-Key": "lost-lease"})
            ready = http.get("/readyz")
            retried = http.post("/v1/posts", json={"text": "x"},
                                headers={"Idempotency-Key": "lost-lease"})
        assert refused.status_code == 503
        assert refused.json()["type"] == "https://feed.example/problems/unavailable"
        assert retried.status_code == 503  # the claim was released, not left in flight
        assert ready.status_code == 503 and ready.json()["checks"]["id_lease"] != "ok"
        # The renewing thread's next step leases a free node id again (the old one is
        # another holder's now) and rebinds the generator: posts are taken again.
        lost = lease.node_id
        assert lease.keep() is True and lease.is_held()
        assert lease.node_id != lost and app.state.ids.node_id == lease.node_id
        with api.client(new_user_id()) as http:
            taken = http.post("/v1/posts", json={"text": "x"},
                              headers={"Idempotency-Key": "lease-taken-again"})
            ready = http.get("/readyz")
            gauge = http.get("/metrics").text
        assert taken.status_code == 201, taken.text
        assert ids.parse(int(taken.json()["post_id"])).node == lease.node_id
        assert ready.json()["checks"]["id_lease"] == "ok"
        assert f"feed_api_id_node {float(lease.node_id)}" in gauge
    finally:
        stop_server(server, thread)
