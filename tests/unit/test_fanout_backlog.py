"""The backlog intake (services/fanout/backlog.py, docs/fanout.md "The backlog intake"):
which posts of a batch go together, what each of them needs, that a batch of them costs
a few rounds and not a few per post, and that taking them together ends exactly where
the per-post path ends, whatever the batches, replays and crashes.

No services: the real ``CopyStore`` and ``PostFanout`` run over a model of Cassandra's
cells (``Cells``: the fan-out's statements interpreted, last write wins by write time,
a tombstone wins a tie), and batches go through the real ``apply_split_batch``.
"""
from __future__ import annotations

import asyncio
import itertools
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.harness.cdc_events import CdcEvents, post_id_at
from services.fanout.audience import PostCopy
from services.fanout.backlog import Drop, Keep, Outcome, plan_old_post, takes_together
from services.fanout.copies import CopyStore
from services.fanout.post_events import PostFanout
from services.fanout.tiering import CapacityEstimate, TierState
from services.shared.contracts.envelope import MalformedEnvelope, parse_change
from services.shared.domain.ranking import rank_key
from services.shared.settings import Settings
from services.shared.worker.batch_consumer import Together, apply_split_batch
from services.shared.worker.faust_app import RawMessage
from services.shared.worker.poison_guard import GuardedProcessing, WorkerMustStop
from tests.support.fakes import RecordingPublisher, TransientError
from tests.support.memory_stores import InMemoryInboxStore

NOW = datetime(2026, 12, 1, 12, tzinfo=timezone.utc)
NOW_MS = int(NOW.timestamp() * 1000)
NOW_US = NOW_MS * 1000
OLD = NOW - timedelta(days=12)      # past the inbox TTL (7 days)
RECENT = NOW - timedelta(days=2)


def _us(at: datetime) -> int:
    return int(at.timestamp() * 1_000_000)


# -- a model of the cells the fan-out's statements write ----------------------------------
class Crash(BaseException):
    """The worker process dies here (nothing catches it; the batch is not acked)."""


class _Prepared:
    def __init__(self, text: str) -> None:
        self.query_string = text
        self.fetch_size: int | None = None


class _Session:
    def prepare(self, text: str) -> _Prepared:
        return _Prepared(text)


_UPDATE = re.compile(r"UPDATE posts USING TIMESTAMP \? SET (.+) WHERE post_id=\?$")
_COPY_COLUMNS = ("author_id", "created_at", "visibility", "deleted", "fanned_out", "score",
                 "rank_key", "rank_key_next")


def _wins(new: object, old: object) -> bool:
    """Cassandra's tie at one write time: a tombstone (a null cell) wins, then the larger value."""
    if new is None:
        return True
    if old is None:
        return False
    return repr(new) > repr(old)


@dataclass
class Cells:
    """``posts`` cells and ``author_timeline`` rows, each with its write time."""

    posts: dict[int, dict[str, tuple[int, Any]]] = field(default_factory=dict)
    timeline: dict[tuple[int, int, float, int], tuple[int, bool]] = field(default_factory=dict)
    writes: int = 0
    crash_after: int | None = None   # writes applied before the process dies
    requests: list[str] = field(default_factory=list)  # what reached the "node", in order

    def apply(self, statement: _Prepared, params: Sequence[Any]) -> list[Any]:
        q = statement.query_string
        self.requests.append(q.split()[0] + (" IN" if " IN ?" in q else ""))
        if q.startswith("SELECT"):
            return self._select(q, params)
        if self.crash_after is not None and self.writes >= self.crash_after:
            raise Crash()
        self.writes += 1
        if m := _UPDATE.match(q):
            ts, *values, post_id = params
            cells = self.posts.setdefault(post_id, {})
            for column, value in zip((c.split("=")[0].strip() for c in m.group(1).split(",")), values):
                current = cells.get(column)
                if current is None or ts > current[0] or (ts == current[0] and _wins(value, current[1])):
                    cells[column] = (ts, value)
        elif q.startswith("INSERT INTO author_timeline"):
            author, bucket, key, post_id, ts = params
            self._row((author, bucket, key, post_id), ts, True)
        elif q.startswith("DELETE FROM author_timeline"):
            ts, author, bucket, key, post_id = params
            self._row((author, bucket, key, post_id), ts, False)
        else:
            raise NotImplementedError(q)
        return []

    def _row(self, row: tuple[int, int, float, int], ts: int, live: bool) -> None:
        current = self.timeline.get(row)
        if current is None or ts > current[0] or (ts == current[0] and not live):
            self.timeline[row] = (ts, live)

    def _select(self, q: str, params: Sequence[Any]) -> list[Any]:
        assert q.startswith("SELECT post_id, author_id, created_at"), q
        ids = params[0] if " IN ?" in q else [params[0]]
        out = []
        for post_id in ids:
            cells = self.posts.get(post_id)
            if not cells:
                continue
            v = {c: cells.get(c, (None, None))[1] for c in _COPY_COLUMNS}
            created = v["created_at"]
            out.append((post_id, v["author_id"],
                        created.astimezone(timezone.utc).replace(tzinfo=None) if created else None,
                        v["visibility"], v["deleted"], cells.get("visibility", (None,))[0],
                        v["fanned_out"], v["score"], v["rank_key"], v["rank_key_next"],
                        cells.get("rank_key", (None,))[0]))
        return out

    def live_rows(self, post_id: int) -> list[tuple[int, int, float, int]]:
        return sorted(row for row, (_ts, live) in self.timeline.items() if live and row[3] == post_id)

    def visible(self, post_ids: Sequence[int]) -> dict[int, tuple[Any, ...]]:
        """What any reader or later decision can tell apart: the copy's state, its live
        timeline rows and, while it is visible, its key and mark."""
        out = {}
        for post_id in post_ids:
            cells = self.posts.get(post_id, {})
            v = {c: cells.get(c, (None, None))[1] for c in ("visibility", "deleted", "text", "rank_key", "fanned_out")}
            alive = v["visibility"] == 1 and not v["deleted"]
            out[post_id] = (alive, v["visibility"], v["deleted"], v["text"], self.live_rows(post_id),
                            v["rank_key"] if alive else None, v["fanned_out"] if alive else None)
        return out


class _Runner:
    """``CqlRunner``'s surface over ``Cells`` (every statement its own request)."""

    def __init__(self, cells: Cells) -> None:
        self.cells = cells

    async def execute(self, statement: _Prepared, params: Sequence[Any] = ()) -> list[Any]:
        await asyncio.sleep(0)
        return self.cells.apply(statement, params)

    async def run_bounded(self, statements: Any, max_in_flight: int) -> int:
        rows = list(statements)
        self.cells.requests.append(f"round of {len(rows)}")
        results = await asyncio.gather(*(self._one(s, p) for s, p in rows), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result
        return len(rows)

    async def _one(self, statement: _Prepared, params: Sequence[Any]) -> None:
        await asyncio.sleep(0)
        self.cells.apply(statement, params)

    async def pages(self, statement: _Prepared, params: Sequence[Any]) -> Any:
        assert statement.query_string.startswith("SELECT follower_id"), statement.query_string
        return
        yield  # an author without followers


class _Tiers:
    def __init__(self) -> None:
        self.capacity = CapacityEstimate(floor_rows_per_s=1000)

    async def state(self, author_id: int) -> TierState:
        return TierState()

    async def tier_for_post(self, author_id: int, followers: int, current: Any = None) -> Any:
        raise AssertionError("a post older than the inbox TTL weighs no tier")


def _fanout(cells: Cells, clock_us: Any) -> PostFanout:
    copies = CopyStore(_Session(), _Runner(cells), 500)  # type: ignore[arg-type]
    return PostFanout(copies, InMemoryInboxStore(), _Tiers(), RecordingPublisher(), "t",  # type: ignore[arg-type]
                      wall_clock_ms=lambda: NOW_MS, wall_clock_us=clock_us, monotonic=lambda: 0.0)


def _clock() -> Any:
    """Wall-clock microseconds that move on at every read, from NOW on."""
    return itertools.count(NOW_US, 1000).__next__


def _guard() -> GuardedProcessing:
    s = Settings(consumer_max_attempts=2, store_retry_attempts=3, store_retry_base_s=0.0,
                 consumer_failure_window=100, consumer_max_failure_share=0.9)

    async def no_sleep(_: float) -> None:
        return None
    return GuardedProcessing(s, RecordingPublisher(), (TransientError,), sleep=no_sleep)  # type: ignore[arg-type]


def _handler(fanout: PostFanout) -> Any:
    async def handle(msg: RawMessage) -> None:
        change = parse_change(msg.key, msg.value)
        if change is not None:
            await fanout.on_post_changed(change)
    return handle


# -- a post's history as CDC messages --------------------------------------------------------
EVENTS = CdcEvents("t")


class History:
    """One post's changes as the relay would send them, kept valid (no restore of a
    deleted post, nothing after a hard delete)."""

    def __init__(self, seq: int, created: datetime, author: int = 7) -> None:
        self.row = EVENTS.post_row(post_id_at(created, seq), author, created)
        self.post_id: int = self.row["post_id"]
        self.gone = False
        self.msgs = EVENTS.post_created(self.row)

    def step(self, op: str) -> None:
        row = self.row
        if self.gone:
            return
        if op == "delete":
            self.msgs += EVENTS.post_deleted(row)  # and its tombstone
            self.gone = True
            return
        after = dict(row)
        if op == "edit":
            after["text"] = row["text"] + "!"
        elif op == "remove" and row["visibility"] == 1 and not row["deleted_at"]:
            after["visibility"] = 0
        elif op == "restore" and row["visibility"] == 0 and not row["deleted_at"]:
            after["visibility"] = 1
        elif op == "soft_delete" and not row["deleted_at"]:
            after["deleted_at"] = "2026-11-30T00:00:00.000000Z"
        else:
            return
        self.msgs += EVENTS.post_updated(row, after)
        self.row = after


OPS = ("edit", "remove", "restore", "soft_delete", "delete")


def _raw(msgs: Sequence[Any], start: int = 0) -> list[RawMessage]:
    return [RawMessage(m.topic, 0, start + i, m.key, m.value) for i, m in enumerate(msgs)]


# -- which posts go together ----------------------------------------------------------------
def _changes(history: History) -> list[Any]:
    return [c for c in (parse_change(m.key, m.value) for m in history.msgs) if c is not None]


def test_posts_past_the_inbox_ttl_go_together_and_recent_ones_post_by_post():
    old, recent = History(1, OLD), History(2, RECENT)
    old.step("delete")
    assert takes_together(_changes(old), NOW)              # a create and its delete, both old
    assert not takes_together(_changes(recent), NOW)
    assert not takes_together([], NOW)                     # only a tombstone: per message
    # The boundary: old exactly when no inbox TTL is left.
    edge = History(3, NOW - timedelta(days=7))
    assert takes_together(_changes(edge), NOW)
    assert not takes_together(_changes(edge), NOW - timedelta(seconds=1))


def test_a_batch_is_split_by_whole_keys():
    old, recent, bad = History(1, OLD), History(2, RECENT), History(3, OLD)
    old.step("edit")
    old.step("delete")
    poison = RawMessage("t.public.posts", 0, 99, bad.msgs[0].key, b'{"op": "c"}')
    msgs = _raw([*old.msgs[:1], *recent.msgs, *old.msgs[1:], *bad.msgs])
    msgs.append(poison)  # bad's key: one of its changes cannot be read, so all of it goes one by one
    together, rest = _fanout(Cells(), _clock()).split_batch(msgs)
    assert together is not None
    assert [m.offset for m in together.msgs] == [0, 2, 3, 4]   # old's create, edit, delete, tombstone
    assert sorted(m.offset for m in rest) == [1, 5, 99]


# -- what an old post needs -------------------------------------------------------------------
POST, AUTHOR = 1_000_001, 7
CREATED_US = _us(OLD)
KEY = rank_key(None, CREATED_US // 1000)


def _copy(alive: bool = True, *, rank: float | None = None, key_ts: int | None = None,
          fanned_out: bool | None = None, created: datetime = OLD, vis_ts: int = 30) -> PostCopy:
    return PostCopy(POST, AUTHOR, created, 1 if alive else 0, False, vis_ts, fanned_out,
                    None, rank, None, key_ts)


def _post(op: str, lsn: int, *, visible: bool = True, was: bool | None = None) -> Any:
    row = {"post_id": POST, "author_id": AUTHOR, "created_at": OLD.isoformat(), "text": "t",
           "media_ids": "[]", "visibility": 1 if visible else 0, "deleted_at": None}
    before = None if was is None else {**row, "visibility": 1 if was else 0}
    if op == "d":
        before, row = row, None
    import json
    return parse_change(b"{}", json.dumps({"op": op, "before": before, "after": row,
                                           "source": {"lsn": lsn, "table": "posts"}}))


NOW_LATER = NOW_US + 5


@pytest.mark.parametrize("copy,changes,plan", [
    # A first create: its key from the score so far, at the post's time; marked not fanned out.
    (_copy(), [_post("c", 10)], Keep(POST, AUTHOR, KEY, CREATED_US, True, 30)),
    # Its replay: the key is on the copy at that time already; the same row and mark again.
    (_copy(rank=KEY, key_ts=CREATED_US), [_post("c", 10)], Keep(POST, AUTHOR, KEY, CREATED_US, False, 30)),
    # A rank move came first: the row goes under the moved key, at the move's time.
    (_copy(rank=KEY + 3, key_ts=CREATED_US + 9), [_post("c", 10)],
     Keep(POST, AUTHOR, KEY + 3, CREATED_US + 9, False, 30)),
    # Created, removed and restored in one batch: the restore writes now, after any tombstone.
    (_copy(vis_ts=40), [_post("c", 10), _post("u", 20, visible=False, was=True), _post("u", 40, was=False)],
     Keep(POST, AUTHOR, KEY, NOW_LATER, True, 40)),
    # Created then deleted in one batch: nothing was materialized, nothing to write.
    (_copy(False), [_post("c", 10), _post("d", 20)], Outcome.UNCHANGED),
    # Deleted in this batch, materialized by an earlier one: tombstones at the decision's time.
    (_copy(False, rank=KEY, key_ts=CREATED_US, fanned_out=False), [_post("d", 20)],
     Drop(POST, AUTHOR, (KEY,), NOW_LATER)),
    # ... unless it may be in inboxes (fanned out while recent, or not known): per post.
    (_copy(False, rank=KEY, key_ts=CREATED_US, fanned_out=True), [_post("d", 20)], Outcome.PER_POST),
    (_copy(False, rank=KEY, key_ts=CREATED_US), [_post("d", 20)], Outcome.PER_POST),
    # An edit that keeps it visible, a create whose post is already gone: the copy only.
    (_copy(rank=KEY, key_ts=CREATED_US), [_post("u", 20, was=True)], Outcome.UNCHANGED),
    (_copy(False), [_post("c", 10)], Outcome.UNCHANGED),
    # A removal a later change undid: that change owns the rows.
    (_copy(), [_post("u", 20, visible=False, was=True)], Outcome.UNCHANGED),
    (None, [_post("c", 10)], Outcome.UNCHANGED),
    # The copy says the post is recent (it never should): the per-post path decides.
    (_copy(created=RECENT), [_post("c", 10)], Outcome.PER_POST),
])
def test_what_an_old_post_needs_from_its_merged_copy(copy, changes, plan):
    taken = takes_together(changes, NOW)
    assert taken is not None and [c.change for c in taken] == changes
    assert plan_old_post(copy, taken, NOW, NOW_LATER) == plan


# -- one round per step, not per post --------------------------------------------------------------
def test_a_batch_of_old_posts_costs_a_few_rounds_whatever_its_size():
    posts = [History(i, OLD - timedelta(minutes=i), author=7 + i % 5) for i in range(120)]
    posts[3].step("delete")
    msgs = _raw([m for p in posts for m in p.msgs])
    cells = Cells()
    fanout = _fanout(cells, _clock())
    together, rest = fanout.split_batch(msgs)
    assert together is not None and rest == []
    asyncio.run(together.apply())
    # The copies (one round), the merged copies (IN reads of 50), the rest (one round).
    assert cells.requests[0] == "round of 121"
    assert cells.requests.count("SELECT IN") == 3 and "SELECT" not in cells.requests
    rounds = [r for r in cells.requests if r.startswith("round")]
    assert rounds == ["round of 121", f"round of {119 * 3}"]
    assert len(cells.requests) == 2 + 3 + 121 + 119 * 3      # rounds, reads, their statements
    assert all(len(cells.live_rows(p.post_id)) == (0 if p is posts[3] else 1) for p in posts)


# -- the batch step under the guard ----------------------------------------------------------------
def test_a_batch_step_that_fails_for_good_hands_its_messages_one_by_one():
    applied: list[int] = []
    attempts = []

    async def handle(msg: RawMessage) -> None:
        if msg.value == b"poison":
            raise MalformedEnvelope("bad")
        applied.append(msg.offset)

    async def step() -> None:
        attempts.append(1)
        raise ValueError("a bug in the step")

    def split(msgs: Sequence[RawMessage]) -> tuple[Together | None, list[RawMessage]]:
        return Together([m for m in msgs if m.key == b"a"], step), [m for m in msgs if m.key != b"a"]

    msgs = [RawMessage("t.public.posts", 0, i, k, v) for i, (k, v) in
            enumerate([(b"a", b"v"), (b"b", b"v"), (b"a", b"poison"), (b"a", b"v")])]
    guard = _guard()
    asyncio.run(apply_split_batch(msgs, guard, handle, 8, split))
    assert attempts == [1]                       # not transient: not retried as a whole
    assert sorted(applied) == [0, 1, 3]           # the step's messages one by one, the poison alone
    assert [h["dlq.original.offset"] for *_x, h in guard._publisher.sent] == [b"2"]


def test_a_batch_step_is_retried_whole_on_a_transient_error_and_stops_the_worker_after():
    calls = []

    async def flaky() -> None:
        calls.append(1)
        if len(calls) < 3:
            raise TransientError("timeout")

    def split(msgs: Sequence[RawMessage]) -> tuple[Together | None, list[RawMessage]]:
        return Together(list(msgs), flaky), []

    async def handle(msg: RawMessage) -> None:
        raise AssertionError("applied together, not one by one")

    msgs = [RawMessage("t.public.posts", 0, 0, b"a", b"v")]
    asyncio.run(apply_split_batch(msgs, _guard(), handle, 8, split))
    assert len(calls) == 3

    async def down() -> None:
        raise TransientError("down")
    with pytest.raises(WorkerMustStop):
        asyncio.run(apply_split_batch(msgs, _guard(), handle, 8, lambda m: (Together(list(m), down), [])))


# -- together ends where post by post ends ---------------------------------------------------------
@st.composite
def backlogs(draw: st.DrawFn) -> tuple[list[History], list[RawMessage], list[int]]:
    """Up to three old posts with up to five changes each, interleaved as one partition
    would hold them, and where the batches are cut."""
    posts = [History(i, OLD - timedelta(hours=i)) for i in range(draw(st.integers(1, 3)))]
    for post in posts:
        for op in draw(st.lists(st.sampled_from(OPS), max_size=5)):
            post.step(op)
    queues = [list(p.msgs) for p in posts]
    order = []
    while any(queues):
        i = draw(st.sampled_from([i for i, q in enumerate(queues) if q]))
        order.append(queues[i].pop(0))
    msgs = _raw(order)
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(msgs) - 1)), max_size=4)))
    return posts, msgs, cuts


def _batches(msgs: list[RawMessage], cuts: list[int]) -> list[list[RawMessage]]:
    bounds = [0, *[c for c in cuts if c < len(msgs)], len(msgs)]
    return [msgs[a:b] for a, b in zip(bounds, bounds[1:]) if b > a]


def _run_batch(cells: Cells, clock: Any, batch: list[RawMessage], together: bool) -> None:
    fanout = _fanout(cells, clock)  # a fresh worker: nothing kept between batches
    split = fanout.split_batch if together else (lambda m: (None, list(m)))
    asyncio.run(apply_split_batch(batch, _guard(), _handler(fanout), 8, split))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(backlogs(), st.data())
def test_together_ends_where_post_by_post_ends_across_batches_crashes_and_replays(backlog, data):
    posts, msgs, cuts = backlog
    ids = [p.post_id for p in posts]
    reference = Cells()
    _run_batch(reference, _clock(), msgs, together=False)   # every change, post by post, once
    for change in (c for p in posts for c in _changes(p)):
        assert takes_together([change], NOW)

    cells, clock = Cells(), _clock()
    batches = _batches(msgs, cuts)
    for batch in batches:
        together = data.draw(st.booleans(), "together")    # a batch may go either way (the setting,
        crash = data.draw(st.none() | st.integers(0, 12), "crash after writes")  # a fallback)
        if crash is not None:
            cells.crash_after = cells.writes + crash
            try:
                _run_batch(cells, clock, batch, together)
            except Crash:
                pass
            cells.crash_after = None   # restarted: the batch was not acked, so it comes again
        _run_batch(cells, clock, batch, data.draw(st.booleans(), "together after"))
    assert cells.visible(ids) == reference.visible(ids)

    if data.draw(st.booleans(), "replay everything"):  # a new consumer group, or a reset offset
        for batch in batches:
            _run_batch(cells, clock, batch, together=True)
        assert cells.visible(ids) == reference.visible(ids)
