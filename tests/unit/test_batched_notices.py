"""A worker's batch merges its serving-changes notices (services/shared/worker/notices.py):
each id named once, sent when the batch is applied or before an announcement, never
lost to a failed send, and sent at once outside a batch."""
from __future__ import annotations

import asyncio
import json

import pytest

from services.shared.contracts.serving_changes import MAX_IDS, ServingChange, parse
from services.shared.stores.cql_async import StoreRetry
from services.shared.worker.event_publisher import deferred_deliveries
from services.shared.worker.notices import Notices, batched_notices, flush_notices
from tests.support.fakes import RecordingPublisher


def _changes(publisher: RecordingPublisher) -> list[ServingChange]:
    return [parse(value) for _t, _k, value, _h in publisher.sent]


def test_outside_a_batch_a_notice_is_sent_at_once():
    publisher = RecordingPublisher()

    async def main() -> None:
        await Notices(publisher, "t.serving-changes").changed(ServingChange(posts=(7,)))
    asyncio.run(main())
    assert _changes(publisher) == [ServingChange(posts=(7,))]


def test_a_batch_names_each_id_once_in_one_notice_sent_when_flushed():
    publisher = RecordingPublisher()
    notices = Notices(publisher, "t.serving-changes")

    async def post(post_id: int, author: int) -> None:
        await notices.changed(ServingChange(posts=(post_id,)))  # the copy
        await notices.changed(ServingChange(posts=(post_id,)))  # its rank key
        await notices.changed(ServingChange(timelines=((author, 20_000),)))
        await notices.changed(ServingChange(inboxes=(1, 2, 3)))

    async def main() -> int:
        with deferred_deliveries() as sent, batched_notices():
            await asyncio.gather(*(post(p, 9) for p in (11, 12, 13)))  # the batch's tasks
            assert publisher.sent == []
            await flush_notices()
        await flush_notices()  # outside a batch: nothing pending, nothing sent
        return len(sent)

    deferred = asyncio.run(main())
    assert _changes(publisher) == [ServingChange(posts=(11, 12, 13), timelines=((9, 20_000),),
                                                 inboxes=(1, 2, 3))]
    assert deferred == 1  # the batch's acks wait for it
    assert notices.sent == 1


def test_a_wide_batch_is_split_under_the_record_limit():
    publisher = RecordingPublisher()
    notices = Notices(publisher, "t.serving-changes")

    async def main() -> None:
        with batched_notices():
            for reader in range(MAX_IDS + 10):
                await notices.changed(ServingChange(inboxes=(reader,)))
            await flush_notices()
    asyncio.run(main())
    sizes = [len(json.loads(v)["inboxes"]) for _t, _k, v, _h in publisher.sent]
    assert sizes == [MAX_IDS, 10]


class FailingOnce(RecordingPublisher):
    def __init__(self) -> None:
        super().__init__()
        self.failed = False

    async def send(self, topic, key, value, headers=()):
        if not self.failed:
            self.failed = True
            raise TimeoutError("no leader")
        return await super().send(topic, key, value, headers)


def test_a_failed_send_keeps_the_notice_for_the_retry():
    publisher = FailingOnce()
    notices = Notices(publisher, "t.serving-changes")

    async def main() -> None:
        with batched_notices():
            await notices.changed(ServingChange(posts=(1,)))
            with pytest.raises(TimeoutError):
                await flush_notices()
            await notices.changed(ServingChange(posts=(2,)))  # added meanwhile
            await StoreRetry(attempts=2, base_s=0, transient=(TimeoutError,))(flush_notices)
    asyncio.run(main())
    assert _changes(publisher) == [ServingChange(posts=(1, 2))]


def test_a_store_retry_may_be_told_what_is_transient_by_a_test():
    calls = []

    async def work() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise ValueError("retry me")
        return "done"

    async def main() -> str:
        return await StoreRetry(attempts=3, base_s=0,
                                transient=lambda exc: isinstance(exc, ValueError))(work)
    assert asyncio.run(main()) == "done" and len(calls) == 3

    async def other() -> None:
        raise KeyError("not transient")
    with pytest.raises(KeyError):
        asyncio.run(StoreRetry(attempts=3, base_s=0, transient=lambda exc: False)(other))
