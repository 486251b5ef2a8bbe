"""``python -m services.fanout.jobs.rebuild_inbox <reader_id> [...]``: refill readers' inboxes.

An operator's command over ``services.fanout.rebuild.rebuild_inbox`` (what it writes and
why it is safe to run any number of times is explained there). Running API processes
drop their cached inbox tops of the rebuilt readers (serving-changes notices).
"""
from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from datetime import datetime, timezone

from services.fanout.copies import CopyStore
from services.fanout.inbox import InboxStore
from services.fanout.rebuild import RebuildReport, rebuild_inbox
from services.shared.contracts.topics import serving_changes_topic
from services.shared.settings import FanoutProcess, load
from services.shared.clients import cql
from services.shared.stores.cql_async import CqlRunner
from services.shared.stores.follows import FollowedAuthors
from services.shared.worker.event_publisher import EventPublisher
from services.shared.worker.notices import Notices


async def _main(reader_ids: list[int], settings: FanoutProcess) -> list[RebuildReport]:
    session = cql.session(settings)
    publisher = EventPublisher(settings)
    await publisher.start()
    try:
        runner = CqlRunner(session)
        copies = CopyStore(session, runner, settings.fanout_follower_page)
        # Running API processes drop their cached inbox tops of the rebuilt readers.
        inbox = InboxStore(session, runner, max_in_flight=settings.fanout_max_in_flight,
                           cap=settings.inbox_cap, trim_every=settings.inbox_trim_every,
                           notices=Notices(publisher, serving_changes_topic(settings.topic_prefix)))
        following = FollowedAuthors(session).followed
        reports = []
        for reader_id in reader_ids:
            authors = [r.followed_id for r in session.execute(following, (reader_id,))]
            reports.append(await rebuild_inbox(reader_id, copies, inbox, authors,
                                               settings.inbox_cap,
                                               lambda: datetime.now(timezone.utc)))
        return reports
    finally:
        await publisher.stop()
        session.cluster.shutdown()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reader_ids", nargs="+", type=int, help="readers whose inbox to rebuild")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for report in asyncio.run(_main(args.reader_ids, load(FanoutProcess))):
        print(f"reader {report.reader_id}: {report.rows_written} inbox rows from "
              f"{report.authors} followed authors")
    return 0


if __name__ == "__main__":
    sys.exit(main())
