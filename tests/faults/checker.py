"""After the system settles: the ledger against Postgres (the truth) and what readers see.

- Acked and lost: every post the API acknowledged (201) is in Postgres.
- Feeds: for every reader, the whole feed walked page by page through the API against
  what Postgres says the reader may see (posts of authors followed now, made since the
  follow, not deleted, visible, no block either way, not muted by the reader, the author
  not suspended or deleted): missing, duplicated and wrongly visible posts. The workload
  lifts its suspensions when the load ends, so a suspended author's posts are owed again
  here: an unsuspend must bring them back. An inbox keeps its ``inbox_cap`` highest rows (the tail is trimmed by
  design), so a reader owed more than the cap less its slack cannot tell loss from trim:
  such readers are counted (``readers_over_cap``) and fail the run as inconclusive
  (``make faults`` runs the services with a cap far above the workload).
- Counters: each author's follower count and each post's like count in Cassandra
  (``follow_edges``/``like_edges`` static columns, no repair step run) against
  ``count(*)`` in Postgres.
- DLQs: every ``*.dlq`` topic of the prefix is empty.
- Shown after the acknowledgement (``shown_after_ack``): every feed page the workload
  was served (its request started after the ack) and every stream event it received
  (after the ack), against each acknowledged delete, removal, block, mute, unfollow,
  suspension (every post of the author, to every reader, until the unsuspend's request
  started) and account deletion (the same, for good): an item the action should have hid is counted, whatever the pipeline was
  doing. A hide later lifted binds the pages answered before the lift's request started
  (a page in flight across the lift may show either). This is the window the settled feeds above cannot see.
- Refusals: a write the API refused with 403 ``account-suspended`` while no suspension of
  its author may have been in force (from the suspension's request to the unsuspend's
  ack) is counted (``wrongly_refused``); the others are expected (the report's
  ``refusals``), neither an error nor an acked post.
- The stream: every post of an author the watcher follows (it never unfollows and is
  never blocked, and mutes no one), acked after its SSE stream first opened and not deleted, arrived as a
  ``new_item`` or was covered by a ``resync`` sent after it was acked (``stream_gaps``:
  neither, a silent gap). A post whose author was suspended at some time after its ack
  is left out: the stream never announces a suspended author's post, and an unsuspend
  does not announce it again (the workload never suspends an author the watcher follows,
  so this only guards the check).
- Postgres to Kafka, when the relay writes its delivery trace
  (``Settings.cdc_delivery_trace``, set by ``make faults``): the last change of every
  follow, like, block, mute and post row of the run (its ``xmin``) was acknowledged by Kafka
  (``cdc_unsent``), and every record Kafka acknowledged is still at its offset
  (``kafka_lost``). A loss further down then says which side of Kafka it happened on.
"""
from __future__ import annotations

import asyncio
import json
import os
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from services.shared.domain.rules import VISIBLE
from services.shared.settings import Settings
from services.shared.clients import cql, kafka, pg

from .workload import Workload


@dataclass
class Verdict:
    acked_posts: int = 0
    acked_writes: int = 0
    lost_writes: int = 0
    feed_lost: int = 0
    feed_duplicated: int = 0
    wrongly_visible: int = 0
    follower_drift: int = 0
    like_drift: int = 0
    dlq_records: int = 0
    stream_gaps: int = 0
    shown_after_ack: int = 0
    hiding_actions: int = 0       # acknowledged deletes, removals, blocks, mutes, unfollows,
    #                               suspensions and account deletions
    wrongly_refused: int = 0      # writes refused as suspended while no suspension was in force
    pages_checked: int = 0
    cdc_unsent: int | None = None   # None: no delivery trace to check against
    kafka_lost: int | None = None
    readers_over_cap: int = 0
    examples: dict[str, list[Any]] = field(default_factory=dict)

    def ok(self) -> bool:
        return not (self.lost_writes or self.feed_lost or self.feed_duplicated or self.wrongly_visible
                    or self.follower_drift or self.like_drift or self.dlq_records
                    or self.stream_gaps or self.shown_after_ack or self.wrongly_refused or self.cdc_unsent or self.kafka_lost or self.readers_over_cap)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# The checker's consumers only read watermarks and assigned partitions (no commits).
CHECKER_GROUP = "faults-checker"
# A page answered 503 (or not at all) is asked again, up to this many times, 1 s apart: a
# client honours Retry-After, and the check is about what was lost, not availability.
PAGE_ATTEMPTS = 10


async def walk_feed(w: Workload, reader: int) -> list[int] | None:
    """Every post id of the reader's feed, in order (None if a page failed). A page that
    says ``snapshot_expired`` is a new first page, so the walk starts again there, as a
    client does."""
    out: list[int] = []
    cursor = None
    for _ in range(100):
        params: dict[str, Any] = {"limit": 100}
        if cursor:
            params["cursor"] = cursor
        for _attempt in range(PAGE_ATTEMPTS):  # a 503 says "retry after 1 s": do so
            r = await w.call("GET", "/v1/feed", reader, params=params)
            if r is not None and r.status_code != 503:
                break
            await asyncio.sleep(1.0)
        if r is None or r.status_code != 200:
            return None
        page = r.json()
        if "snapshot_expired" in page.get("warnings", ()):
            out = []  # the snapshot was lost (a failed write): this page starts a new walk
        out += [int(i["post_id"]) for i in page["items"]]
        cursor = page.get("next_cursor")
        if not cursor:
            return out
    return out


def _visible(settings: Settings, readers: list[int], authors: list[int]) -> dict[int, set[int]]:
    """Per reader, the workload posts Postgres says they may see now."""
    with pg.connect(settings) as conn:
        rows = conn.execute(
            "SELECT f.follower_id, p.post_id FROM follows f JOIN posts p ON p.author_id = f.followed_id "
            "WHERE f.follower_id = ANY(%s) AND p.author_id = ANY(%s) AND p.deleted_at IS NULL "
            f"AND p.visibility = {VISIBLE} AND date_trunc('milliseconds', p.created_at) >= "
            "date_trunc('milliseconds', f.following_since) AND NOT EXISTS ("
            " SELECT 1 FROM blocks b WHERE (b.blocker_id = f.follower_id AND b.blocked_id = p.author_id)"
            " OR (b.blocker_id = p.author_id AND b.blocked_id = f.follower_id))"
            " AND NOT EXISTS (SELECT 1 FROM mutes m WHERE m.muter_id = f.follower_id"
            " AND m.muted_id = p.author_id)"
            " AND NOT EXISTS (SELECT 1 FROM account_states a WHERE a.user_id = p.author_id)",
            (readers, authors)).fetchall()
    out: dict[int, set[int]] = {r: set() for r in readers}
    for reader, post in rows:
        out[reader].add(post)
    return out


def _counts(settings: Settings, w: Workload) -> tuple[int, int, list[Any]]:
    authors = list(w.cast.posting)
    posts = list(w.ledger.posts)
    if w.backlog is not None:  # the backlog scenario's users and posts too
        authors += w.backlog.authors
        posts += w.backlog.posts
    with pg.connect(settings) as conn:
        followers = dict(conn.execute("SELECT followed_id, count(*) FROM follows WHERE followed_id = ANY(%s) "
                                      "GROUP BY followed_id", (authors,)).fetchall())
        likes = dict(conn.execute("SELECT post_id, count(*) FROM likes WHERE post_id = ANY(%s) "
                                  "GROUP BY post_id", (posts,)).fetchall())
    session = cql.session(settings)
    examples: list[Any] = []

    def drift(query: str, name: str, ids: list[int], truth: dict[int, int]) -> int:
        """Sum of |Cassandra count - Postgres count| over ``ids``; examples recorded."""
        stmt = session.prepare(query)
        total = 0
        for i in ids:
            row = session.execute(stmt, (i,)).one()
            got, want = (row[0] if row else 0) or 0, truth.get(i, 0)
            if got != want:
                total += abs(got - want)
                examples.append({name: i, "cassandra": got, "postgres": want})
        return total

    try:
        follower_drift = drift("SELECT followers FROM follow_edges WHERE followed_id=? LIMIT 1",
                               "author", authors, followers)
        like_drift = drift("SELECT likes FROM like_edges WHERE post_id=? LIMIT 1", "post", posts, likes)
    finally:
        session.cluster.shutdown()
    return follower_drift, like_drift, examples[:10]


def _dlq_records(settings: Settings) -> int:
    admin = kafka.admin(settings)
    meta = admin.list_topics(timeout=10)
    probe = kafka.consumer(settings, {"group.id": CHECKER_GROUP})
    total = 0
    try:
        for name, topic in meta.topics.items():
            if name.startswith(settings.topic_prefix + ".") and name.endswith(".dlq"):
                for p in topic.partitions:
                    low, high = _watermarks(probe, TopicPartition(name, p))
                    total += high - low
    finally:
        probe.close()
    return total


async def check(settings: Settings, w: Workload) -> Verdict:
    v = Verdict()
    led = w.ledger
    v.acked_posts = len(led.posts)
    v.acked_writes = len(led.posts) + len(led.likes) + sum(led.actions.values())
    with pg.connect(settings) as conn:
        stored = {r[0] for r in conn.execute("SELECT post_id FROM posts WHERE post_id = ANY(%s)",
                                             (list(led.posts),)).fetchall()}
    lost = sorted(set(led.posts) - stored)
    v.lost_writes = len(lost)
    v.examples["lost_writes"] = lost[:10]
    authors = w.cast.posting
    # Only this run's acknowledged posts count (the cast is fresh, so this is a guard).
    expected = {r: ps & set(led.posts) for r, ps in _visible(settings, w.cast.readers, authors).items()}
    owed_at_most = settings.inbox_cap - settings.inbox_trim_every
    over = [r for r in w.cast.readers if len(expected[r]) > owed_at_most]
    v.readers_over_cap = len(over)
    v.examples["readers_over_cap"] = [{"reader": r, "owed": len(expected[r]), "inbox_cap": settings.inbox_cap}
                                      for r in over[:10]]
    missing: list[Any] = []
    wrong: list[Any] = []
    for reader in w.cast.readers:
        seen = await walk_feed(w, reader)
        if seen is None:
            missing.append({"reader": reader, "feed": "unreadable"})
            v.feed_lost += len(expected[reader])
            continue
        mine = [p for p in seen if p in led.posts]
        counts = Counter(mine)
        v.feed_duplicated += sum(n - 1 for n in counts.values() if n > 1)
        gone = expected[reader] - set(mine)
        extra = set(mine) - expected[reader]
        v.feed_lost += len(gone)
        v.wrongly_visible += len(extra)
        missing += [{"reader": reader, "post": p} for p in sorted(gone)[:3]]
        wrong += [{"reader": reader, "post": p} for p in sorted(extra)[:3]]
    v.examples["feed_lost"] = missing[:10]
    v.examples["wrongly_visible"] = wrong[:10]
    v.shown_after_ack, v.examples["shown_after_ack"] = shown_after_ack(w)
    v.hiding_actions = sum(led.actions[k] for k in ("delete", "remove", "block", "mute", "unfollow", "suspend",
                                                    "delete_account"))
    v.wrongly_refused = wrongly_refused(w)
    v.pages_checked = len(led.pages)
    v.follower_drift, v.like_drift, v.examples["counter_drift"] = _counts(settings, w)
    v.dlq_records = _dlq_records(settings)
    # Announcements trail the fan-out (the API's own consumer): give the stream up to
    # STREAM_SETTLE_S to deliver what it owes before a missing one counts as a gap.
    deadline = time.monotonic() + STREAM_SETTLE_S
    while stream_gaps(w)[0] and time.monotonic() < deadline:
        await asyncio.sleep(1.0)
    v.stream_gaps, v.examples["stream_gaps"] = stream_gaps(w)
    if settings.cdc_delivery_trace and os.path.exists(settings.cdc_delivery_trace):
        v.cdc_unsent, v.kafka_lost, v.examples["cdc"] = _cdc_gaps(settings, w)
    return v


STREAM_SETTLE_S = 60.0


def author_tier(settings: Settings, author: int) -> str | None:
    """The author's tier in ``author_tiers`` (None: no row, an ordinary author never moved)."""
    session = cql.session(settings)
    try:
        rows = session.execute("SELECT tier FROM author_tiers WHERE author_id = %s", (author,)).all()
    finally:
        session.cluster.shutdown()
    return rows[0].tier if rows else None


def shown_after_ack(w: Workload) -> tuple[int, list[Any]]:
    """Items served after an acknowledged action that should have hidden them: on a page
    whose request started after the ack, or a stream event received after it."""
    led = w.ledger
    by_pair: dict[tuple[int, int], list[Any]] = {}
    for h in led.pair_hidden:
        by_pair.setdefault((h.reader, h.author), []).append(h)
    # A suspension hides the author's posts from every reader until its unsuspend started,
    # a deletion (DELETE /v1/me) for good.
    by_account: dict[int, list[Any]] = {}
    for s in led.account_hidden:
        by_account.setdefault(s.author, []).append(s)
    # (the request started, its answer arrived, reader, post, where)
    served = [(p.started, p.started if p.answered is None else p.answered, p.reader, post, "page")
              for p in led.pages for post in p.ids]
    # An event counts from when the server wrote it (its ``sent`` comment), not from when
    # this client's loop got to it: a delete's answer and an event written just before
    # it are read in either order here. The stamp is read as the bytes are written, after
    # any wait for a paused socket (services/api/stream/write_deadline.py): a write held
    # up past an ack carries a stamp past it and is counted. The server refuses (sends
    # ``resync`` instead) a write more than 50 ms after the event's last check, so the
    # commit wait keeps every ack it missed after the stamp; a late write the server let
    # through is still counted here, from its stamp.
    served += [(stamp, stamp, w.cast.watcher, post, "stream")
               for at, kind, post, sent in led.stream if kind == "new_item" and post is not None
               for stamp in (at if sent is None else sent,)]
    shown: list[Any] = []
    for at, done, reader, post, where in served:
        hidden_at = led.hidden_posts.get(post)
        if hidden_at is not None and hidden_at <= at:
            shown.append({"where": where, "reader": reader, "post": post, "why": "deleted or removed",
                          "after_ack_s": round(at - hidden_at, 3)})
            continue
        # A hide binds what started after its ack and was answered before its lift's
        # request started (``until``); a page in flight across the lift may show either.
        author = led.posts.get(post, (None, 0.0))[0]
        suspended = next((s for s in by_account.get(author, ())  # type: ignore[arg-type]
                          if s.since <= at and done < s.until), None)
        if suspended is not None:
            shown.append({"where": where, "reader": reader, "post": post, "why": suspended.kind,
                          "after_ack_s": round(at - suspended.since, 3),
                          "answered_s": round(done - at, 3)})
            continue
        for h in by_pair.get((reader, author), ()):  # type: ignore[arg-type]
            if h.since <= at and done < h.until:
                shown.append({"where": where, "reader": reader, "post": post, "why": h.kind,
                              "after_ack_s": round(at - h.since, 3), "answered_s": round(done - at, 3)})
                break
    return len(shown), shown[:10]


def wrongly_refused(w: Workload) -> int:
    """Writes refused as suspended (403 ``account-suspended``) while no suspension of
    their author may have been in force."""
    return sum(phase["account-suspended while active"] for phase in w.ledger.refusals.values())


def stream_gaps(w: Workload) -> tuple[int, list[Any]]:
    """Posts the watcher's stream owed it and never sent, with no later ``resync``
    (a post whose author was suspended at some time after its ack is not owed)."""
    led = w.ledger
    if not led.stream_opened:
        return 0, [{"stream": "never opened", "statuses": dict(led.stream_statuses)}]
    opened = led.stream_opened[0] + 1.0
    followed = {w.cast.wide, w.cast.celebrity} | {
        a for (r, a), on in led.follows.items() if r == w.cast.watcher and on}
    announced = {post for _, kind, post, _ in led.stream if kind == "new_item"}
    resyncs = [at for at, kind, _, _ in led.stream if kind == "resync"]
    gaps = [post for post, (author, acked) in led.posts.items()
            if author in followed and post not in led.hidden_posts and acked >= opened
            and post not in announced and not any(at >= acked for at in resyncs)
            and not led.suspended_between(author, acked, float("inf"))]
    return len(gaps), sorted(gaps)[:10]


# The run's rows whose last change must have reached Kafka: (table, key columns, filter).
_CAPTURED = (("follows", "follower_id, followed_id", "follower_id = ANY(%(users)s)"),
             ("blocks", "blocker_id, blocked_id", "blocker_id = ANY(%(users)s)"),
             ("mutes", "muter_id, muted_id", "muter_id = ANY(%(users)s)"),
             ("likes", "post_id, user_id", "user_id = ANY(%(users)s)"),
             ("posts", "post_id", "author_id = ANY(%(users)s)"))


def _cdc_gaps(settings: Settings, w: Workload) -> tuple[int, int, list[Any]]:
    """Rows of the run whose last change no acknowledged record carries, and acknowledged
    records that are no longer at their offset."""
    acked: dict[int, list[tuple[str, int, int]]] = {}
    for line in open(settings.cdc_delivery_trace):
        try:
            d = json.loads(line)
        except ValueError:
            continue  # a line cut by a SIGKILL
        if d.get("error") is None and d.get("xid") is not None:
            acked.setdefault(d["xid"], []).append((d["topic"], d["partition"], d["offset"]))
    users = w.cast.everyone
    unsent: list[Any] = []
    wanted: dict[tuple[str, int], set[int]] = {}
    with pg.connect(settings) as conn:
        for table, key, where in _CAPTURED:
            rows = conn.execute(f"SELECT {key}, xmin::text::bigint FROM {table} WHERE {where}",
                                {"users": users}).fetchall()
            for row in rows:
                xid = row[-1]
                if xid not in acked:
                    unsent.append({"table": table, "key": list(row[:-1]), "xid": xid})
                for topic, partition, offset in acked.get(xid, ()):
                    wanted.setdefault((topic, partition), set()).add(offset)
    lost = _missing_offsets(settings, wanted)
    return len(unsent), len(lost), (unsent[:5] + lost[:5])


# Transient Kafka errors the checker reads through (a leader that moved after the fault).
RETRIES = 10
# Answers librdkafka does not flag retriable for this call, though a refreshed metadata
# (it refreshes on them) names the new leader.
LEADER_MOVED = (KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE)


def _watermarks(client: Consumer, tp: TopicPartition) -> tuple[int, int]:
    """The partition's low and high watermarks, asked again on a retriable error."""
    for attempt in range(RETRIES):
        try:
            return client.get_watermark_offsets(tp, timeout=10)
        except KafkaException as exc:
            error = exc.args[0]
            if attempt == RETRIES - 1 or not (error.retriable() or error.code() in LEADER_MOVED):
                raise
            time.sleep(1.0)
    raise AssertionError("unreachable")


def _missing_offsets(settings: Settings, wanted: dict[tuple[str, int], set[int]]) -> list[Any]:
    """Acknowledged (topic, partition, offset)s that a read of the partition does not return."""
    consumer = kafka.consumer(settings, {"group.id": CHECKER_GROUP,
                                         "enable.auto.commit": False, "enable.partition.eof": True})
    missing: list[Any] = []
    try:
        for (topic, partition), offsets in wanted.items():
            low, high = _watermarks(consumer, TopicPartition(topic, partition))
            present: set[int] = set()
            start = min(offsets)
            if start < high:
                consumer.assign([TopicPartition(topic, partition, max(start, low))])
                errors = 0
                while True:
                    msg = consumer.poll(5)
                    if msg is None or (msg.error() and msg.error().code() == KafkaError._PARTITION_EOF):
                        break
                    if msg.error():  # a leader moving after the fault: read on
                        errors += 1
                        if errors > RETRIES:
                            break
                        continue
                    present.add(msg.offset())
                    if msg.offset() >= min(high - 1, max(offsets)):
                        break
            missing += [{"topic": topic, "partition": partition, "offset": o}
                        for o in sorted(offsets - present)]
    finally:
        consumer.close()
    return missing
