"""Several fan-out workers in one consumer group, on the real stack.

Three ``python -m services.fanout`` processes share one group over topics of six
partitions. The group's own view (the coordinator's assignment, ``deploy.assignment``,
AdminClient.describe_consumer_groups) must give each of them partitions, each worker's
``/readyz`` must say what it holds, every worker must apply posts, and the inboxes must
hold every row owed once. Then one of three is SIGKILLed in the middle of a drain: the
two left take its partitions, and still no row is lost or written twice.
"""
from __future__ import annotations

import collections
import random
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from bench.harness.cdc_events import CdcMessage, post_id_at
from bench.harness.pipeline import group_caught_up
from deploy.assignment import Group, describe
from services.shared.contracts.topics import cdc_topic
from services.shared.settings import Settings
from tests.support.processes import free_port
from tests.support.worker_env import WorkerEnv, open_worker_env, wait_for_workers

pytestmark = pytest.mark.integration

PARTITIONS = 6
WORKERS = 3
GROUP = "scale"
FANOUT_TOPICS = ("posts", "follows")


@pytest.fixture
def wide_env(settings: Settings, tmp_path: Path) -> Iterator[WorkerEnv]:
    """A worker env whose topics have six partitions."""
    yield from open_worker_env(settings.model_copy(update={"kafka_partitions": PARTITIONS}), tmp_path)


def _now() -> datetime:
    return datetime.now(timezone.utc)


class Graph:
    """Readers following authors (an hour ago), and the posts the authors then write."""

    def __init__(self, env: WorkerEnv, authors: int, readers: int, follows_each: int,
                 posts_each: int, seed: int) -> None:
        rng = random.Random(seed)
        base = rng.randrange(10**6, 10**9)
        self.authors = [base + i for i in range(authors)]
        self.readers = [base + 10_000 + i for i in range(readers)]
        self.follows = {r: rng.sample(self.authors, follows_each) for r in self.readers}
        now = _now()
        self.posts: dict[int, int] = {}  # post -> author
        seq = 0
        for k in range(posts_each):
            for a in self.authors:
                seq += 1
                self.posts[post_id_at(now - timedelta(seconds=k), seq)] = a
        self.env = env

    def follow_events(self) -> list[CdcMessage]:
        e, since = self.env.events, _now() - timedelta(hours=1)
        return [m for r, authors in self.follows.items() for a in authors for m in e.followed(r, a, since)]

    def post_events(self) -> list[CdcMessage]:
        e, now = self.env.events, _now()
        return [m for p, a in self.posts.items() for m in e.post_created(e.post_row(p, a, now))]

    def owed(self) -> set[tuple[int, int]]:
        by_author = collections.defaultdict(list)
        for p, a in self.posts.items():
            by_author[a].append(p)
        return {(r, p) for r, authors in self.follows.items() for a in authors for p in by_author[a]}

    def rows(self) -> collections.Counter[tuple[int, int]]:
        """Every (reader, post) inbox row of this graph's readers, counted (a post under
        two rank keys would count twice)."""
        got: collections.Counter[tuple[int, int]] = collections.Counter()
        for r in self.env.rows("SELECT reader_id, post_id FROM feed_inbox"):
            if r.reader_id in self.follows:
                got[(r.reader_id, r.post_id)] += 1
        return got


def _group(env: WorkerEnv) -> Group:
    [group] = describe(env.settings, [GROUP])
    return group


def _stable_with(env: WorkerEnv, members: int) -> Group | None:
    group = _group(env)
    return group if group.state == "STABLE" and len(group.members) == members else None


def _metric(address: str, name: str, **labels: str) -> float:
    text = httpx.get(f"http://{address}/metrics", timeout=5).text
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))


def _start_workers(env: WorkerEnv, **overrides: object) -> list[str]:
    addresses = []
    for _ in range(WORKERS):
        port = free_port()
        env.start("services.fanout", GROUP, fanout_metrics_port=port, **overrides)
        addresses.append(f"127.0.0.1:{port}")
    return addresses


def _check_inboxes(graph: Graph) -> None:
    owed, got = graph.owed(), graph.rows()
    lost = owed - set(got)
    duplicated = {k: n for k, n in got.items() if n > 1}
    unowed = set(got) - owed
    assert (len(lost), len(duplicated), len(unowed)) == (0, 0, 0), (
        f"{len(lost)} rows lost (e.g. {sorted(lost)[:3]}; {_lost_by(graph, owed, lost)}), "
        f"{len(duplicated)} duplicated (e.g. {list(duplicated.items())[:3]}), "
        f"{len(unowed)} not owed, of {len(owed)}")


def _lost_by(graph: Graph, owed: set[tuple[int, int]], lost: set[tuple[int, int]]) -> str:
    """Where lost rows sit: whole posts (no follower has the post: its fan-out was lost),
    or whole follows (a reader has none of an author's posts: the edge was lost)."""
    owed_by_post = collections.Counter(p for _, p in owed)
    lost_by_post = collections.Counter(p for _, p in lost)
    whole_posts = sum(1 for p, n in lost_by_post.items() if n == owed_by_post[p])
    posts_of = collections.Counter(graph.posts.values())
    lost_by_edge = collections.Counter((r, graph.posts[p]) for r, p in lost)
    whole_edges = sum(1 for (r, a), n in lost_by_edge.items() if n == posts_of[a])
    return (f"{len(lost_by_post)} posts short, {whole_posts} of them wholly; "
            f"{len(lost_by_edge)} follows short, {whole_edges} of them wholly")


def test_three_workers_share_six_partitions_and_lose_or_duplicate_no_inbox_row(wide_env: WorkerEnv) -> None:
    env = wide_env
    graph = Graph(env, authors=30, readers=120, follows_each=6, posts_each=5, seed=1)
    env.send(graph.follow_events())
    addresses = _start_workers(env)
    group = wait_for_workers(lambda: _stable_with(env, WORKERS), timeout=120,
                             message="three members in a stable group")

    # The coordinator's assignment: every worker holds partitions, none twice, all held.
    members = group.by_address()
    assert sorted(members) == sorted(addresses), [m.client_id for m in group.members]
    posts_topic = cdc_topic("posts", env.settings.topic_prefix)
    held = {a: {p for t, p in m.partitions if t == posts_topic} for a, m in members.items()}
    assert all(held.values()), f"a worker holds no partition of the posts topic: {held}"
    assert sorted(p for ps in held.values() for p in ps) == list(range(PARTITIONS))
    everything = [tp for m in group.members for tp in m.partitions]
    assert len(everything) == len(set(everything))

    # Each worker's own /readyz says it is a member and holds what the group says.
    def ready(address: str) -> dict | None:
        r = httpx.get(f"http://{address}/readyz", timeout=5)
        return r.json() if r.status_code == 200 else None
    for address in addresses:
        doc = wait_for_workers(lambda: ready(address), message=f"{address} ready")
        assert doc["checks"]["group"]["detail"].startswith(f"{len(members[address].partitions)} partitions")
        assert doc["checks"]["stores"]["ok"] and doc["checks"]["event loop"]["ok"]
        live = httpx.get(f"http://{address}/healthz", timeout=5)
        assert live.status_code == 200 and live.json()["checks"]["consumer thread"]["ok"]

    env.send(graph.post_events())
    wait_for_workers(lambda: group_caught_up(env.settings, GROUP, [
        cdc_topic(t, env.settings.topic_prefix) for t in FANOUT_TOPICS]), timeout=180,
        message="the group caught up")
    _check_inboxes(graph)
    # Every worker applied posts (keys spread over the six partitions).
    applied = {a: _metric(a, "feed_consumer_messages_total", topic=posts_topic, outcome="ok")
               for a in addresses}
    assert all(n > 0 for n in applied.values()), applied
    assert sum(applied.values()) >= len(graph.posts)


def test_one_of_three_killed_mid_drain_loses_and_duplicates_no_inbox_row(wide_env: WorkerEnv) -> None:
    env = wide_env
    graph = Graph(env, authors=60, readers=300, follows_each=12, posts_each=8, seed=2)
    env.send(graph.follow_events())
    # Slow enough that the kill lands while the drain is under way.
    addresses = _start_workers(env, fanout_max_in_flight=2, fanout_posts_in_flight=2,
                               fanout_follower_page=20, consumer_batch_max=50)
    before = wait_for_workers(lambda: _stable_with(env, WORKERS), timeout=120,
                              message="three members in a stable group")
    wait_for_workers(lambda: group_caught_up(env.settings, GROUP, [
        cdc_topic("follows", env.settings.topic_prefix)]), timeout=180, message="follows applied")
    owed = len(graph.owed())
    env.send(graph.post_events())

    def written() -> float:
        return sum(_metric(a, "feed_fanout_inbox_rows_total") for a in addresses)
    at_kill = wait_for_workers(lambda: written() >= owed * 0.05 and written(), timeout=120,
                               interval=0.05, message="the drain under way")
    victim = addresses[1]
    env.kill(env.procs[1])
    assert at_kill < owed * 0.8, f"the kill came after {at_kill:.0f} of {owed} rows: not mid-drain"

    after = wait_for_workers(lambda: _stable_with(env, WORKERS - 1), timeout=120,
                             message="the two workers left in a stable group")
    assert victim not in after.by_address()
    all_partitions = sorted(tp for m in before.members for tp in m.partitions)
    assert sorted(tp for m in after.members for tp in m.partitions) == all_partitions
    victims_share = set(before.by_address()[victim].partitions)
    assert victims_share and victims_share <= {tp for m in after.members for tp in m.partitions}

    wait_for_workers(lambda: group_caught_up(env.settings, GROUP, [
        cdc_topic(t, env.settings.topic_prefix) for t in FANOUT_TOPICS]), timeout=300,
        message="the two workers left caught up")
    _check_inboxes(graph)
