"""Follower and like counts on real Cassandra (and Kafka): a crash or a retry at any point
neither loses nor doubles a count, and a stale owner's late write loses
(services/shared/stores/counted_edges.py, services/shared/domain/owned_counts.py).

The changes carry duplicates and reorderings (an edge's newer change delivered before
its older one). The truth is the number of edges whose newest change is active.
"""
from __future__ import annotations

import asyncio
import json
from collections import defaultdict
from datetime import datetime, timedelta, timezone
from typing import Any, Sequence

from cassandra.query import BatchStatement

from services.fanout.copies import FOLLOW_EDGES, CopyStore
from services.fanout.inbox import InboxStore
from services.fanout.relation_events import RelationChanges
from services.ranker.rank_keys import RankKeys
from services.ranker.store import LIKE_EDGES, RankStore
from services.shared.contracts import edge_counts
from services.shared.contracts.envelope import parse_change
from services.shared.contracts.topics import cdc_topic, follow_counts_topic, like_counts_topic
from services.shared.domain.edge_transitions import EdgeChange, EdgeState
from services.shared.stores.counted_edges import CountedEdges, OwnedChange
from services.shared.stores.cql_async import CqlRunner, Executable
from services.shared.worker.batch_consumer import apply_batch
from services.shared.worker.count_owner import CountOwner
from services.shared.worker.faust_app import RawMessage
from bench.harness.cdc_events import CdcEvents, CdcMessage
from bench.harness.pipeline import group_caught_up
from tests.support.worker_env import follower_counts, like_counts, wait_for_workers


def _now() -> datetime:
    return datetime.now(timezone.utc)


def true_counts(messages: Sequence[CdcMessage], partition: str, edge: str) -> dict[int, int]:
    """Per partition, the edges whose newest change (highest LSN) is not a delete."""
    newest: dict[tuple[int, int], tuple[int, bool]] = {}
    for m in messages:
        if m.value is None:
            continue
        value, key = json.loads(m.value), json.loads(m.key)
        lsn, ident = value["source"]["lsn"], (key[partition], key[edge])
        if ident not in newest or lsn > newest[ident][0]:
            newest[ident] = (lsn, value["op"] != "d")
    counts: dict[int, int] = defaultdict(int)
    for (p, _), (_, active) in newest.items():
        counts[p] += active
    return dict(counts)


def differences(stored: dict[int, int], want: dict[int, int]) -> dict[int, tuple[int, int]]:
    """Partitions whose stored count is not the true one (a count never written is 0)."""
    return {p: (stored.get(p, 0), want.get(p, 0)) for p in set(stored) | set(want)
            if stored.get(p, 0) != want.get(p, 0)}


def follow_changes(e: CdcEvents, authors: Sequence[int], followers: Sequence[int]) -> list[CdcMessage]:
    """Follows of ``authors`` with a duplicate, an unfollow, a re-follow and a reordering."""
    since = _now() - timedelta(hours=1)
    first, second = authors
    out = [m for f in followers for m in e.followed(f, second, since)]      # one partition, coalesced
    follow = e.followed(followers[0], first, since)
    out += follow + follow                                                  # duplicate
    out += e.followed(followers[1], first, since) + e.unfollowed(followers[1], first, since)
    older, newer = e.followed(followers[2], first, since), e.unfollowed(followers[2], first, since)
    out += newer + older                                                    # newer change first
    out += e.unfollowed(followers[3], second, since) + e.followed(followers[3], second, since)
    return out


def like_changes(e: CdcEvents, posts: Sequence[int], users: Sequence[int]) -> list[CdcMessage]:
    """Likes of a hot post and a quiet one, with duplicates, unlikes and a reordering."""
    hot, quiet = posts
    now = _now()
    likes = [m for u in users for m in e.liked(hot, u, now)]
    out = likes + likes[:4]                                                 # duplicates
    out += e.unliked(hot, users[0], now)
    older, newer = e.liked(quiet, users[1], now), e.unliked(quiet, users[1], now)
    out += newer + older + e.liked(quiet, users[2], now)
    return out


# -- a crash after (or before) any statement, then the whole batch replayed -----------------------

class SimulatedCrash(Exception):
    """The worker died here: nothing after it runs, nothing of its batch is acked."""


class CrashingRunner(CqlRunner):
    """The workers' store calls, dying at the ``crash_at``-th statement of a pass: after
    the node applied it (the caller never learns) or before it is sent; once dead, every
    statement fails until the restart (``revive``)."""

    def __init__(self, session: Any) -> None:
        super().__init__(session)
        self.crash_at: int | None = None
        self.after = True
        self.executed = 0
        self.dead = False
        self.crashed_on: Executable | None = None

    def arm(self, crash_at: int | None, after: bool) -> None:
        self.crash_at, self.after, self.executed, self.dead, self.crashed_on = crash_at, after, 0, False, None

    async def _call(self, statement: Executable, params: Sequence[Any],
                    paging_state: bytes | None) -> tuple[list[Any], bytes | None]:
        if self.dead:
            raise SimulatedCrash("after the crash")
        self.executed += 1
        if self.executed == self.crash_at:
            if self.after:
                await super()._call(statement, params, paging_state)
            self.dead, self.crashed_on = True, statement
            raise SimulatedCrash(f"statement {self.executed}")
        return await super()._call(statement, params, paging_state)


class _NoGuard:
    """GuardedProcessing's place in ``apply_batch``: an error ends the batch (the crash)."""

    async def process(self, msg: RawMessage, handle: Any) -> str:
        await handle(msg)
        return "ok"


class CountTopics:
    """The count topics as the brokers keep them: what the handlers published, in order
    (a record published by a pass that then crashed stays, as it would in Kafka)."""

    def __init__(self) -> None:
        self.records: dict[str, list[tuple[bytes | None, bytes | None]]] = defaultdict(list)

    async def send(self, topic: str, key: bytes | None, value: bytes | None, headers: Any = ()) -> asyncio.Future:
        self.records[topic].append((key, value))
        done: asyncio.Future = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done

    def messages(self, topic: str) -> list[RawMessage]:
        return [RawMessage(topic, 0, i, k, v) for i, (k, v) in enumerate(self.records[topic])]


def _raw(messages: Sequence[CdcMessage]) -> list[RawMessage]:
    return [RawMessage(m.topic, 0, i, m.key, m.value) for i, m in enumerate(messages)]


async def _settle() -> None:
    """Let every task the dead pass left behind finish (they fail: the runner is dead)."""
    others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    await asyncio.gather(*others, return_exceptions=True)


def test_a_crash_after_or_before_any_statement_then_the_replay_counts_each_follow_and_like_once(worker_env):
    """One pass: the follows and likes handlers (copies, count records published), then
    the counts' owners over every record their topics hold. A crash at any statement of
    the pass, then the whole pass again: the source batch replayed (its records published
    a second time) and the count topics consumed from offset 0 (nothing was committed)."""
    env, e = worker_env, worker_env.events
    prefix = env.settings.topic_prefix
    follows_topic, likes_topic = follow_counts_topic(prefix), like_counts_topic(prefix)

    async def scenario() -> tuple[int, int]:
        runner = CrashingRunner(env.session)
        topics = CountTopics()
        copies = CopyStore(env.session, runner, 100)
        inbox = InboxStore(env.session, runner, max_in_flight=8, cap=500, trim_every=1_000_000)
        relations = RelationChanges(copies, inbox, topics, prefix, _now)  # type: ignore[arg-type]
        ranks = RankStore(env.session, runner=runner)

        async def publish_count(record: edge_counts.EdgeCounted) -> None:
            await topics.send(likes_topic, *edge_counts.encode(record))
        keys = RankKeys(ranks, lambda move: asyncio.sleep(0), publish_count)
        follow_edges = CountedEdges(env.session, runner, FOLLOW_EDGES, 1)
        like_edges = CountedEdges(env.session, runner, LIKE_EDGES, 1)
        count_writes = {stmt.query_id for edges in (follow_edges, like_edges)
                        for stmt in (edges._write_edge, edges._write_count)}  # noqa: SLF001

        async def handle(msg: RawMessage) -> None:
            change = parse_change(msg.key, msg.value)
            if change is None:
                return
            if msg.topic == cdc_topic("follows", prefix):
                await relations.on_follow_changed(change)
            else:
                await keys.on_like_changed(change)

        async def one_pass(batch: list[RawMessage]) -> None:
            await apply_batch(batch, _NoGuard(), handle, 64)  # type: ignore[arg-type]
            for topic, edges in ((follows_topic, follow_edges), (likes_topic, like_edges)):
                owner = CountOwner(edges, 16)                   # a new owner: from offset 0
                await apply_batch(topics.messages(topic), _NoGuard(), owner.take, 64)  # type: ignore[arg-type]
                await owner.apply()

        points = after_count = 0
        crash_at = 1
        while True:
            for after in (True, False):
                # Fresh ids each pass: every crash lands in a first application, not a replay.
                base = 1_000_000 * (2 * crash_at + after)
                follows = follow_changes(e, [base + 1, base + 2], [base + 10 + i for i in range(6)])
                likes = like_changes(e, [base + 3, base + 4], [base + 100 + i for i in range(12)])
                batch = _raw(follows + likes)
                topics.records.clear()
                runner.arm(crash_at, after)
                try:
                    await one_pass(batch)
                except SimulatedCrash:
                    pass
                await _settle()
                if runner.crash_at is not None and runner.executed < runner.crash_at:
                    return points, after_count                     # past the last statement
                points += 1
                after_count += after and _count_batch(runner.crashed_on, count_writes)
                runner.arm(None, True)
                await one_pass(batch)                              # the replay
                for author, n in true_counts(follows, "followed_id", "follower_id").items():
                    assert await copies.followers_count(author) == n, (crash_at, after, author)
                for post, n in true_counts(likes, "post_id", "user_id").items():
                    assert await ranks.likes(post) == n, (crash_at, after, post)
            crash_at += 1

    points, after_count = asyncio.run(scenario())
    print(f"{points} crash points, {after_count} right after a count batch")
    # Every statement of a pass was a crash point, the count batches among them: right
    # after one is where a counter bumped after the state lost its increment.
    assert points >= 40 and after_count >= 4, (points, after_count)


def _count_batch(statement: Executable | None, count_writes: set[bytes]) -> bool:
    """Whether ``statement`` is a batch of counted edges."""
    if not isinstance(statement, BatchStatement):
        return False
    # Entries are (prepared, query id, values).
    return any(entry[1] in count_writes for entry in statement._statements_and_parameters)  # noqa: SLF001


# -- workers SIGKILLed mid-batch, several times ---------------------------------------------------

def test_workers_killed_mid_batch_and_restarted_never_lose_or_double_a_count(worker_env):
    env, e = worker_env, worker_env.events
    prefix = env.settings.topic_prefix
    authors, posts = [501, 502, 503], [601, 602, 603]
    follows = [m for i, a in enumerate(authors)
               for m in follow_changes(e, [a, 900 + i], list(range(10_000 * (i + 1), 10_000 * (i + 1) + 300)))]
    likes = [m for i, p in enumerate(posts)
             for m in like_changes(e, [p, 700 + i], list(range(20_000 * (i + 1), 20_000 * (i + 1) + 300)))]
    env.send(follows, likes)
    want_follows = true_counts(follows, "followed_id", "follower_id")
    want_likes = true_counts(likes, "post_id", "user_id")
    topics = {"services.fanout": [cdc_topic("follows", prefix), follow_counts_topic(prefix)],
              "services.ranker": [cdc_topic("likes", prefix), like_counts_topic(prefix)]}
    # Small batches: every kill lands among many acked and unacked batches.
    options = {"consumer_batch_max": 40}

    def progress() -> int:
        return sum(follower_counts(env).values()) + sum(like_counts(env).values())

    workers = {m: env.start(m, f"kill-{m.rsplit('.', 1)[1]}", **options) for m in topics}
    total = sum(want_follows.values()) + sum(want_likes.values())
    for share in (0.2, 0.45, 0.7):
        wait_for_workers(lambda: progress() >= share * total, timeout=180, message=f"{share:.0%} counted")
        for module, proc in workers.items():
            env.kill(proc)
            workers[module] = env.start(module, f"kill-{module.rsplit('.', 1)[1]}", **options)
    for module, proc in workers.items():
        group = f"kill-{module.rsplit('.', 1)[1]}"
        wait_for_workers(lambda: group_caught_up(env.settings, group, topics[module]), timeout=240,
                         message=f"{module} caught up after the kills")
    assert differences(follower_counts(env), want_follows) == {}
    assert differences(like_counts(env), want_likes) == {}


# -- owners that overlap ---------------------------------------------------------------------------

class GatedRunner(CqlRunner):
    """Holds every batch until ``gate`` opens (``held`` is set once one waits): the
    owner's read is answered, its write is not sent."""

    def __init__(self, session: Any) -> None:
        super().__init__(session)
        self.gate, self.held = asyncio.Event(), asyncio.Event()

    async def _call(self, statement: Executable, params: Sequence[Any],
                    paging_state: bytes | None) -> tuple[list[Any], bytes | None]:
        if isinstance(statement, BatchStatement):
            self.held.set()
            await self.gate.wait()
        return await super()._call(statement, params, paging_state)


def _follow(edge: int, active: bool, lsn: int, offset: int) -> OwnedChange:
    return OwnedChange(EdgeChange(edge, active, lsn), offset)


def test_a_stale_owners_batch_that_lands_late_loses_to_the_new_owners(worker_env):
    """The partition moved to another worker while its old owner's batch was on its way
    (planned from an empty partition, offsets 0-1): the new owner applies offsets 0-1
    again and then an unfollow at offset 4, and only then does the old batch land."""
    env = worker_env
    author = 4242

    async def scenario() -> tuple[int, dict[int, EdgeState]]:
        gated = GatedRunner(env.session)
        stale = CountedEdges(env.session, gated, FOLLOW_EDGES, 1)
        owner = CountedEdges(env.session, CqlRunner(env.session), FOLLOW_EDGES, 1)
        first = [_follow(1, True, 10, 0), _follow(2, True, 11, 1)]
        held = asyncio.ensure_future(stale.apply(author, first))
        await asyncio.wait_for(gated.held.wait(), 30)        # read done, batch not sent
        assert await owner.apply(author, first) == 2
        assert await owner.apply(author, [_follow(1, False, 20, 4)]) == -1
        gated.gate.set()
        assert await asyncio.wait_for(held, 30) == 2          # it wrote +2, at offset 1's time
        rows = env.rows("SELECT follower_id, following, lsn FROM follow_edges WHERE followed_id=%s "
                        "AND follower_id IN (1, 2)", author)
        return await owner.count(author), {r.follower_id: EdgeState(r.following, r.lsn) for r in rows}

    count, edges = asyncio.run(scenario())
    assert count == 1                                         # not 2: the late batch lost
    assert edges == {1: EdgeState(False, 20), 2: EdgeState(True, 11)}


def test_an_owner_ahead_of_a_replaying_one_is_never_undone(worker_env):
    """The old owner kept going past the new owner's start (offsets 0-5 written); the new
    owner replays offsets 0-5 from its committed offset 0, then goes on."""
    env = worker_env
    author = 4343

    async def scenario() -> tuple[int, int]:
        ahead = CountedEdges(env.session, CqlRunner(env.session), FOLLOW_EDGES, 1)
        owner = CountedEdges(env.session, CqlRunner(env.session), FOLLOW_EDGES, 1)
        changes = [_follow(i, True, 100 + i, i) for i in range(5)] + [_follow(0, False, 200, 5)]
        await ahead.apply(author, changes)
        replayed = sum([await owner.apply(author, changes[:3]), await owner.apply(author, changes[3:])])
        await owner.apply(author, [_follow(9, True, 300, 6)])
        return replayed, await owner.count(author)

    assert asyncio.run(scenario()) == (0, 5)                  # the replay wrote nothing


def test_the_first_owned_write_carries_on_from_a_count_written_by_paxos(worker_env):
    """A keyspace counted by the conditional batches this replaced: the owned write
    times are above any wall clock, so the owner's first batch wins and starts from it."""
    env = worker_env
    author = 4444
    env.session.execute("UPDATE follow_edges SET followers = 5, lsn = 0 WHERE followed_id = %s "
                        "AND follower_id = -1 IF followers = null", (author,))
    env.session.execute("UPDATE follow_edges SET following = true, lsn = 50 WHERE followed_id = %s "
                        "AND follower_id = 7 IF lsn = null", (author,))

    async def scenario() -> tuple[int, int]:
        owner = CountedEdges(env.session, CqlRunner(env.session), FOLLOW_EDGES, 1)
        moved = await owner.apply(author, [_follow(7, True, 50, 0), _follow(8, True, 60, 1)])
        return moved, await owner.count(author)

    assert asyncio.run(scenario()) == (1, 6)                  # 7's follow was counted already
