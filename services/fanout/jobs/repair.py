"""``python -m services.fanout.jobs.repair``: compare the Cassandra copies with Postgres and
repair what differs (anti-entropy), for chosen readers and authors.

- ``--reader ID`` (repeatable): the reader's follows (the ``following`` copy and Postgres's
  ``follows`` of the reader, both ways: a copy Postgres lacks, a row the copy lacks; with
  the ``followers`` rows and the edge's state in ``follow_edges``), their blocks (both
  directions), their mutes (the muter's one row), then their inbox: ``rebuild_inbox`` (services/fanout/rebuild.py) picks the
  eligible posts and the rows it finds missing are written.
- ``--author ID`` (repeatable): the author's posts made within an inbox's age (Postgres's
  ``posts`` against the ``posts`` copies: deleted, removed, missing) and the
  ``author_timeline`` rows of the visible ones.
- ``--sample N``: N random readers and N random authors (of the last week's posts).

The comparisons and repairs are the visibility verifier's (services/fanout/copy_audit.py):
written at Postgres's WAL position once the transactions writing then have ended, so a
repair beats the stale copy and loses to any later change. Running API processes drop
what their caches hold of a repaired copy (serving-changes notices). ``--dry-run``
reports and writes nothing (its inbox figures are what a rebuild would pick from the
copies as they are, unrepaired).

Prints one line per difference, then per kind ``checked / differing / repaired``; exits 0,
or 1 with ``--fail-on-difference`` when anything differed. ``--json``: one JSON object.
``--metrics-file``: the counts as gauges (``feed_copy_audit_{checked,differing,repaired}``)
in a Prometheus textfile, as reconcile writes its drift.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any, Iterable, Mapping, Sequence

from prometheus_client import REGISTRY, write_to_textfile

from services.fanout.copies import CopyStore
from services.fanout.copy_audit import (BLOCK, BLOCK_IN, BLOCK_OUT, FOLLOW, FOLLOW_COUNT, FOLLOWERS,
                                        FOLLOWING, MUTE, POST, TIMELINE, AsyncConn, CopyAudit, CountSink,
                                        Difference, Key, WritersStillOpen, count_sink)
from services.fanout.inbox import InboxRow, InboxStore
from services.fanout.metrics import COPY_AUDIT_CHECKED, COPY_AUDIT_DIFFERING, COPY_AUDIT_REPAIRED
from services.fanout.rebuild import rebuild_inbox
from services.shared.clients import cql, pg
from services.shared.contracts.edge_counts import EdgeCounted
from services.shared.contracts.serving_changes import NO_NOTICES, ChangeSink
from services.shared.contracts.topics import serving_changes_topic
from services.shared.domain.rules import INBOX_TTL_S
from services.shared.settings import FanoutProcess, load
from services.shared.stores.cql_async import CqlRunner
from services.shared.worker.event_publisher import EventPublisher
from services.shared.worker.notices import Notices

log = logging.getLogger(__name__)

INBOX = "inbox"
# The kinds a report counts, in print order.
KINDS = (POST, TIMELINE, FOLLOWING, FOLLOWERS, FOLLOW_COUNT, BLOCK, MUTE, INBOX)
# Which parts each kind of key is checked for.
_PARTS = {POST: (POST,), TIMELINE: (TIMELINE,), FOLLOW: (FOLLOWING, FOLLOWERS, FOLLOW_COUNT),
          BLOCK: (BLOCK,), MUTE: (MUTE,)}


def report_kind(part: str) -> str:
    """The report's kind of a difference's part (a block's two rows are one kind)."""
    return BLOCK if part in (BLOCK_OUT, BLOCK_IN) else part


@dataclass
class Tally:
    checked: int = 0
    differing: int = 0
    repaired: int = 0


@dataclass
class Report:
    dry_run: bool
    kinds: dict[str, Tally] = field(default_factory=lambda: {k: Tally() for k in KINDS})
    differences: list[dict[str, Any]] = field(default_factory=list)

    @property
    def differed(self) -> bool:
        return any(t.differing for t in self.kinds.values())

    def count(self, keys: Iterable[Key], found: Mapping[Key, Sequence[Difference]],
              repaired: Mapping[Key, Sequence[Difference]]) -> None:
        """Counts keys checked per part, and per kind the keys that differed and were
        repaired (a key once per kind, whichever of its parts differed)."""
        for key in keys:
            for part in _PARTS[key.kind]:
                self.kinds[part].checked += 1
        for key, diffs in found.items():
            fixed = {report_kind(d.part) for d in repaired.get(key, ())}
            for kind in dict.fromkeys(report_kind(d.part) for d in diffs):
                self.kinds[kind].differing += 1
                self.kinds[kind].repaired += int(kind in fixed)
            for d in diffs:
                self.differences.append({"kind": key.kind, "subject_id": key.subject_id,
                                         "object_id": key.object_id, "part": d.part,
                                         "postgres": d.truth, "copy": d.copy,
                                         "repaired": report_kind(d.part) in fixed})


class _Picked:
    """An inbox port that keeps what ``rebuild_inbox`` would push, writing nothing."""

    def __init__(self) -> None:
        self.rows: list[InboxRow] = []

    async def push_posts(self, reader_id: int, rows: Sequence[InboxRow]) -> int:
        self.rows.extend(rows)
        return len(rows)

    async def push(self, reader_ids: Iterable[int], post_id: int, author_id: int,
                   rank_key: float, key_ts: int, ttl_s: int = INBOX_TTL_S) -> int:
        raise NotImplementedError

    async def push_many(self, pushes: Sequence[tuple[Sequence[int], InboxRow]]) -> int:
        raise NotImplementedError

    async def move(self, reader_ids: Iterable[int], post_id: int, author_id: int,
                   old_keys: Sequence[float], new_key: float, key_ts: int, ttl_s: int) -> int:
        raise NotImplementedError

    async def unpush(self, reader_ids: Iterable[int], post_id: int, keys: Sequence[float],
                     ts: int) -> int:
        raise NotImplementedError

    async def purge_author(self, reader_id: int, author_id: int, ts: int,
                           in_flight: Iterable[tuple[float, int]] = ()) -> int:
        raise NotImplementedError

    async def enforce_cap(self, reader_ids: Iterable[int], post_id: int, ts: int) -> int:
        raise NotImplementedError


class Repair:
    """Compares (and, unless ``dry_run``, repairs) readers and authors into ``report``."""

    def __init__(self, audit: CopyAudit, inbox: InboxStore, conn: AsyncConn, cap: int,
                 dry_run: bool) -> None:
        self.audit = audit
        self.inbox = inbox
        self.conn = conn
        self.cap = cap
        self.dry_run = dry_run
        self.report = Report(dry_run)

    async def _keys(self, keys: list[Key]) -> None:
        found = await self.audit.check(self.conn, keys)
        repaired: Mapping[Key, Sequence[Difference]] = {}
        if found and not self.dry_run:
            try:
                repaired = (await self.audit.repair(self.conn, found)).repaired
            except WritersStillOpen as exc:
                log.warning("not repaired (run it again): %s", exc)
        self.report.count(keys, found, repaired)

    async def _column(self, sql: str, params: Sequence[Any]) -> list[Any]:
        cur = await self.conn.execute(sql, params)
        return [r[0] if len(r) == 1 else tuple(r) for r in await cur.fetchall()]

    async def reader(self, reader_id: int) -> None:
        followed = await self._column("SELECT followed_id FROM follows WHERE follower_id = %s",
                                      (reader_id,))
        blocks = await self._column("SELECT blocker_id, blocked_id FROM blocks"
                                    " WHERE blocker_id = %s OR blocked_id = %s", (reader_id, reader_id))
        in_copy = await self.audit.followed_in_copy(reader_id)
        blocks_in_copy = await self.audit.blocks_in_copy(reader_id)
        muted = await self._column("SELECT muted_id FROM mutes WHERE muter_id = %s", (reader_id,))
        muted_in_copy = [m for _r, m in await self.audit.mutes_in_copy(reader_id)]
        await self._keys([Key(FOLLOW, reader_id, a) for a in dict.fromkeys([*followed, *in_copy])]
                         + [Key(BLOCK, b, d) for b, d in dict.fromkeys([*blocks, *blocks_in_copy])]
                         + [Key(MUTE, reader_id, m) for m in dict.fromkeys([*muted, *muted_in_copy])])
        await self._inbox(reader_id, followed)

    async def _inbox(self, reader_id: int, followed: list[int]) -> None:
        """The rows ``rebuild_inbox`` picks from the (repaired) copies that the inbox
        lacks, written (``repaired``: rows written)."""
        picked = _Picked()
        await rebuild_inbox(reader_id, self.audit.copies, picked, followed, self.cap,
                            lambda: datetime.now(timezone.utc))
        present = {(r.rank_key, r.post_id) for r in await self.inbox.rows(reader_id)}
        missing = [r for r in picked.rows if (r.rank_key, r.post_id) not in present]
        tally = self.report.kinds[INBOX]
        tally.checked += len(picked.rows)
        tally.differing += len(missing)
        if missing and not self.dry_run:
            tally.repaired += await self.inbox.push_posts(reader_id, missing)
        for row in missing:
            self.report.differences.append({"kind": INBOX, "subject_id": reader_id,
                                            "object_id": row.post_id, "part": INBOX,
                                            "postgres": "eligible", "copy": "no inbox row",
                                            "repaired": not self.dry_run})

    async def author(self, author_id: int) -> None:
        posts = await self._column(
            "SELECT post_id FROM posts WHERE author_id = %s"
            " AND created_at >= now() - make_interval(secs => %s) ORDER BY post_id",
            (author_id, INBOX_TTL_S))
        in_timeline = sorted(await self.audit.timeline_posts(author_id))
        await self._keys([Key(POST, p, author_id) for p in dict.fromkeys([*posts, *in_timeline])])
        # After the copies: a timeline row is written under the (repaired) copy's key.
        await self._keys([Key(TIMELINE, p, author_id) for p in posts])


async def sample(conn: AsyncConn, n: int) -> tuple[list[int], list[int]]:
    """``n`` random readers (users) and ``n`` random authors of the last week's posts."""
    cur = await conn.execute("SELECT user_id FROM users ORDER BY random() LIMIT %s", (n,))
    readers = [r[0] for r in await cur.fetchall()]
    cur = await conn.execute(
        "SELECT author_id FROM (SELECT DISTINCT author_id FROM posts"
        " WHERE created_at >= now() - make_interval(secs => %s)) a ORDER BY random() LIMIT %s",
        (INBOX_TTL_S, n))
    return readers, [r[0] for r in await cur.fetchall()]


async def _no_counts(change: EdgeCounted) -> None:
    raise AssertionError(f"a dry run publishes nothing: {change}")


async def run(settings: FanoutProcess, readers: Sequence[int], authors: Sequence[int], *,
              sample_n: int = 0, dry_run: bool = False) -> Report:
    session = cql.session(settings)
    publisher: EventPublisher | None = None
    try:
        runner = CqlRunner(session)
        notices: ChangeSink = NO_NOTICES
        count: CountSink = _no_counts
        if not dry_run:
            publisher = EventPublisher(settings)
            await publisher.start()
            notices = Notices(publisher, serving_changes_topic(settings.topic_prefix))
            count = count_sink(publisher, settings.topic_prefix)
        copies = CopyStore(session, runner, settings.fanout_follower_page, notices)
        inbox = InboxStore(session, runner, max_in_flight=settings.fanout_max_in_flight,
                           cap=settings.inbox_cap, trim_every=settings.inbox_trim_every,
                           notices=notices)
        audit = CopyAudit(session, runner, copies, count)
        async with await pg.async_connect(settings, autocommit=True, connect_timeout=10) as conn:
            readers, authors = list(readers), list(authors)
            if sample_n > 0:
                more_readers, more_authors = await sample(conn, sample_n)
                readers += more_readers
                authors += more_authors
            repair = Repair(audit, inbox, conn, settings.inbox_cap, dry_run)
            # Authors first: an inbox is rebuilt from the authors' timelines.
            for author_id in dict.fromkeys(authors):
                await repair.author(author_id)
            for reader_id in dict.fromkeys(readers):
                await repair.reader(reader_id)
            return repair.report
    finally:
        if publisher is not None:
            await publisher.stop()
        session.cluster.shutdown()


def export(report: Report) -> None:
    for kind, tally in report.kinds.items():
        COPY_AUDIT_CHECKED.labels(kind).set(tally.checked)
        COPY_AUDIT_DIFFERING.labels(kind).set(tally.differing)
        COPY_AUDIT_REPAIRED.labels(kind).set(tally.repaired)


def print_report(report: Report, as_json: bool) -> None:
    if as_json:
        print(json.dumps({"dry_run": report.dry_run,
                          "kinds": {k: asdict(t) for k, t in report.kinds.items()},
                          "differences": report.differences}))
        return
    for d in report.differences:
        done = "repaired" if d["repaired"] else ("not repaired (dry run)" if report.dry_run
                                                 else "NOT repaired")
        print(f"{d['kind']} {d['subject_id']} -> {d['object_id']}: {d['part']}: "
              f"postgres {d['postgres']}, copy {d['copy']}: {done}")
    print(f"{'kind':<14}{'checked':>9}{'differing':>11}{'repaired':>10}")
    for kind, t in report.kinds.items():
        print(f"{kind:<14}{t.checked:>9}{t.differing:>11}{t.repaired:>10}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m services.fanout.jobs.repair",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reader", type=int, action="append", default=[], metavar="ID",
                        help="a reader whose follows, blocks and inbox to compare (repeatable)")
    parser.add_argument("--author", type=int, action="append", default=[], metavar="ID",
                        help="an author whose posts and timeline to compare (repeatable)")
    parser.add_argument("--sample", type=int, default=0, metavar="N",
                        help="also N random readers and N random authors")
    parser.add_argument("--dry-run", action="store_true", help="report only; write nothing")
    parser.add_argument("--json", action="store_true", help="the report as one JSON object")
    parser.add_argument("--metrics-file", help="write the counts as gauges to this Prometheus textfile")
    parser.add_argument("--fail-on-difference", action="store_true",
                        help="exit 1 when anything differed")
    args = parser.parse_args(argv)
    if not (args.reader or args.author or args.sample > 0):
        parser.error("name at least one --reader, --author or --sample N")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("cassandra").setLevel(logging.ERROR)  # the driver's advice on every prepare
    report = asyncio.run(run(load(FanoutProcess), args.reader, args.author, sample_n=args.sample,
                             dry_run=args.dry_run))
    print_report(report, args.json)
    differing = sum(t.differing for t in report.kinds.values())
    repaired = sum(t.repaired for t in report.kinds.values())
    print(f"repair: {differing} difference(s), {repaired} repaired"
          f"{' (dry run: nothing written)' if args.dry_run else ''}", file=sys.stderr)
    if args.metrics_file:
        export(report)
        write_to_textfile(args.metrics_file, REGISTRY)
    return 1 if report.differed and args.fail_on_difference else 0


if __name__ == "__main__":
    sys.exit(main())
