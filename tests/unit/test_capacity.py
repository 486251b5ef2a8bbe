"""The capacity model (bench/run/capacity.py): load arithmetic and what it derives from costs."""
from __future__ import annotations

import json

import pytest

from bench.run.capacity import Costs, Load, instance_limits, main, plan

COSTS = Costs(api_first_us=250.0, api_next_us=500.0, cassandra_read_us=10.0, worker_row_us=20.0,
              cassandra_row_us=25.0, rows_per_post=100.0, relay_event_us=50.0, postgres_event_us=30.0,
              cdc_events_per_post=4.0, kafka_record_us=5.0, records_per_post=6.0)


def test_load_follows_the_target_ratio() -> None:
    load = Load(readers=86_400_000, pages_per_reader=10, reads_per_post=1000, next_share=0.25, peak=2)
    assert load.pages_per_s == pytest.approx(20_000)   # 86.4M x 10 / 86,400 s x 2
    assert load.posts_per_s == pytest.approx(20)


def test_plan_charges_each_component_its_own_work() -> None:
    load = Load(readers=86_400_000, pages_per_reader=10, reads_per_post=1000, next_share=0.5, peak=1)
    p = plan(load, COSTS, utilisation=0.5, cores_per_node=8, rf=3)
    # 10,000 pages/s x (0.5 x 250 + 0.5 x 500) µs = 3.75 core-s/s, at 50 % = 7.5 cores
    assert p["cores"]["API processes"] == pytest.approx(7.5)
    # 10 posts/s x 100 rows x 20 µs / 0.5
    assert p["cores"]["fan-out workers"] == pytest.approx(0.04)
    # reads 10,000 x 10 µs, rows 1,000 x 25 µs x RF 3, at 50 %
    assert p["cores"]["Cassandra"] == pytest.approx((0.1 + 0.075) / 0.5)
    assert p["processes"] == {"API processes": 8, "fan-out workers": 1, "CDC relays": 1}
    assert p["nodes"]["Cassandra"] == 3 and p["nodes"]["Kafka"] == 3   # never fewer than RF
    assert p["nodes"]["Postgres"] == 1
    # Kafka: every record on RF brokers. 10 posts/s x 6,000 records x 5 µs x RF 3, at 50 %
    chatty = Costs(**{**COSTS.__dict__, "records_per_post": 6000.0})
    assert plan(load, chatty, utilisation=0.5, cores_per_node=8, rf=3)["cores"]["Kafka"] == pytest.approx(1.8)
    assert p["posts partitions"] == 3   # twice the one worker, never under the default 3
    assert p["saturates first"] == "API processes"


def test_the_write_side_saturates_first_when_posts_are_expensive() -> None:
    heavy = Costs(**{**COSTS.__dict__, "rows_per_post": 100_000.0})
    p = plan(Load(1e6, 20, 1000, 0.25, 3), heavy, utilisation=0.6, cores_per_node=8, rf=3)
    assert p["saturates first"] == "Cassandra"


def test_instance_limits() -> None:
    assert instance_limits(COSTS, utilisation=1.0)["CDC events/s per relay (one slot)"] == 20_000


def test_a_result_without_costs_is_refused(tmp_path) -> None:
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"meta": {}}))
    with pytest.raises(SystemExit, match="no 'costs'"):
        main([str(path)])


def test_the_partitions_printed_are_a_setting_the_migrator_takes() -> None:
    from bench.run.capacity import partitions_setting, topic_partitions
    from services.shared.contracts.topics import all_topics
    from services.shared.settings.services import partition_counts

    assert set(topic_partitions(1).values()) == {3}       # never under the default
    wanted = topic_partitions(13)
    assert set(wanted.values()) == {26}                   # twice the workers
    name, _, value = partitions_setting(wanted).partition("=")
    assert name == "FEED_KAFKA_TOPIC_PARTITIONS"
    sized = {t.short: t.partitions for t in all_topics("p", partition_counts(value)) if t.short}
    assert all(sized[topic] == 26 for topic in wanted)


def test_cassandra_per_page_is_charged_over_our_runs_gross_and_net() -> None:
    from bench.run.main import read_costs

    def run(page: str, ok: int, cass: float | None, idle: float) -> dict:
        return {"page": page, "concurrency": 16, "requests": ok, "ok": ok, "server_cpu_s": ok * 3e-4,
                "duration_s": 10.0, "store_cpu_s": {"cassandra": cass, "postgres": 5.0},
                "store_idle_cpu_per_s": {"cassandra": idle, "postgres": 0.5}}
    reads = [run("first", 10_000, 0.5, 0.02), run("next", 10_000, 0.3, 0.02),
             run("next", 5_000, None, 0.0)]   # a run whose store restarted: not charged
    costs = read_costs({"cassandra CPU-s": 4.0}, reads)
    # (0.5 + 0.3) s over 20,000 pages; net of 0.02 CPU/s x 10 s each
    assert costs["Cassandra µs per page of ours (computed, over our runs)"] == 40.0
    assert costs["Cassandra µs per page of ours, net of its background (computed, over our runs)"] == 20.0
    # The whole phase's 4 CPU-s over all 25,000 of our pages, as before
    assert costs["Cassandra µs per page of ours (computed, the phase's)"] == 160.0
    result = {"costs": {"history": {}, "reads": costs}}
    picked = next(v for k, v in result["costs"]["reads"].items() if k.startswith("Cassandra µs per page"))
    assert picked == 40.0   # what capacity.py's Costs.of takes: our runs, gross
    # Results from before per-run store CPU keep the phase's figure only.
    old = read_costs({"cassandra CPU-s": 4.0}, [{k: v for k, v in r.items() if k != "store_cpu_s"} for r in reads])
    assert "Cassandra µs per page of ours (computed, over our runs)" not in old


def test_the_api_costs_are_reported_beside_healthz_at_the_same_concurrency() -> None:
    from bench.run.main import read_costs

    reads = [{"page": page, "concurrency": 16, "requests": 10_000, "server_cpu_s": 2.5}
             for page in ("first", "next")]
    baselines = [{"page": "healthz", "concurrency": 1, "requests": 1_000, "server_cpu_s": 1.0},
                 {"page": "healthz", "concurrency": 16, "requests": 20_000, "server_cpu_s": 2.0},
                 {"page": "first", "concurrency": 16, "requests": 5_000, "server_cpu_s": 3.0}]  # pull
    costs = read_costs({"cassandra CPU-s": 1.0}, reads, baselines)
    assert costs["API µs per first page (computed, c16)"] == 250.0
    assert costs["/healthz µs per request (computed, c16)"] == 100.0   # c16 only, /healthz only
    assert costs["first page / /healthz, µs a request (computed, c16)"] == 2.5
    assert costs["next page / /healthz, µs a request (computed, c16)"] == 2.5
    assert "/healthz µs per request (computed, c16)" not in read_costs({}, reads)
