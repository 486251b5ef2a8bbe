"""Several workers per role: how ``deploy.services`` names them and where they listen
(deploy/stack/workers.py), what the stack's Prometheus scrapes, what each worker tells
its group, and that no worker keeps local state another would need (no faust tables)."""
from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import pytest

from deploy import services
from deploy.assignment import Member, held
from deploy.stack import prometheus
from deploy.stack.layout import Layout
from deploy.stack.process import StackError
from deploy.stack.workers import PORT_STRIDE, instances, worker_counts
from services.shared.settings import Settings
from services.shared.worker import faust_app


def test_worker_counts_come_from_the_environment_one_each_by_default() -> None:
    assert worker_counts({}) == {"fanout": 1, "ranker": 1}
    assert worker_counts({"FEED_FANOUT_WORKERS": "3", "FEED_RANKER_WORKERS": "2"}) == {
        "fanout": 3, "ranker": 2}
    with pytest.raises(StackError, match="FEED_FANOUT_WORKERS=0"):
        worker_counts({"FEED_FANOUT_WORKERS": "0"})
    with pytest.raises(StackError, match="not a number"):
        worker_counts({"FEED_RANKER_WORKERS": "two"})


def test_each_worker_has_its_own_name_and_port_apart_from_the_other_roles() -> None:
    s = Settings()
    every = instances(s, {"fanout": 3, "ranker": 2})
    assert [(i.name, i.port) for i in every] == [
        ("cdc", 9101), ("fanout", 9102), ("fanout-1", 9112), ("fanout-2", 9122),
        ("ranker", 9103), ("ranker-1", 9113), ("api", 8080)]
    assert len({i.port for i in every}) == len(every)


def test_ports_that_would_collide_are_refused_naming_both() -> None:
    s = Settings(fanout_metrics_port=9200, ranker_metrics_port=9200 + PORT_STRIDE)
    assert instances(s, {"fanout": 1, "ranker": 1})
    with pytest.raises(StackError, match="ranker and fanout-1 would both listen on port 9210"):
        instances(s, {"fanout": 2, "ranker": 1})


@pytest.fixture
def layout(stack_layout: Callable[[int], Layout]) -> Iterator[Layout]:
    yield stack_layout(1)


def test_stop_and_status_find_every_worker_started_whatever_the_counts_now(layout: Layout) -> None:
    layout.run.mkdir(parents=True)
    for name in ("api", "fanout-2", "ranker", "fanout", "cdc", "fanout-1", "ranker-1"):
        (layout.run / f"svc-{name}.pid").write_text("999999999")
    assert [d.name for d in services.recorded(layout)] == [
        "cdc", "fanout", "fanout-1", "fanout-2", "ranker", "ranker-1", "api"]
    d = services.daemon(layout, "fanout-2")
    assert d.log_file.name == "svc-fanout-2.log" and d.marker == "services.fanout"
    assert services.worker_ports(Settings(), layout) == {"fanout": [9102, 9112, 9122],
                                                         "ranker": [9103, 9113]}


def test_prometheus_scrapes_every_worker() -> None:
    jobs = prometheus.targets({"fanout": 3, "ranker": 2})
    assert jobs["feed-fanout"] == ["127.0.0.1:9102", "127.0.0.1:9112", "127.0.0.1:9122"]
    assert jobs["feed-ranker"] == ["127.0.0.1:9103", "127.0.0.1:9113"]
    assert jobs["feed-api"] == "127.0.0.1:8080"
    conf = json.loads(json.dumps(prometheus.config(jobs)))
    by_job = {c["job_name"]: c["static_configs"][0]["targets"] for c in conf["scrape_configs"]}
    assert by_job["feed-fanout"] == jobs["feed-fanout"] and by_job["feed-cdc"] == ["127.0.0.1:9101"]


def test_prometheus_is_left_alone_when_it_is_not_running(layout: Layout) -> None:
    assert prometheus.refresh(layout, {"fanout": 3, "ranker": 1}) is False


def test_a_member_is_shown_by_the_partition_numbers_it_holds() -> None:
    member = Member("m-1", "feed.fanout@127.0.0.1:9112", "/127.0.0.1", (
        ("feed.public.posts", 1), ("feed.public.posts", 4), ("feed.public.follows", 1),
        ("feed.public.follows", 4), ("feed.follow-counts", 1)))
    assert member.address == "127.0.0.1:9112"
    assert held(member, "feed.") == "5 partitions: 1 of follow-counts; 1,4 of public.follows, public.posts"
    assert Member("m-2", "rdkafka", "/127.0.0.1", ()).address is None
    assert held(Member("m-3", "x@h:1", "/h", ()), "feed.") == "no partitions"


@pytest.fixture
def named_worker() -> Iterator[str]:
    before = faust_app._worker_address
    faust_app._worker_address = faust_app.worker_address("0.0.0.0", 9112)
    yield faust_app._worker_address
    faust_app._worker_address = before


@pytest.mark.parametrize("role", ["fanout", "ranker"])
def test_a_worker_names_itself_to_its_group_and_keeps_no_local_state(role: str, named_worker: str) -> None:
    if role == "fanout":
        from services.fanout.app import create_app
    else:
        from services.ranker.app import create_app
    app = create_app(Settings())
    assert named_worker == "127.0.0.1:9112"
    assert app.conf.broker_client_id == f"feed.{role}@127.0.0.1:9112"
    assert str(app.conf.canonical_url) == "http://127.0.0.1:9112"
    # No faust table: no RocksDB or changelog, nothing a partition's next holder would
    # need from this process, and nothing several processes sharing the working
    # directory's <app id>-data folder could trip over. A table added later must say how
    # it is safe with several workers (standby replicas, a data dir per worker) here.
    assert len(app.tables) == 0
