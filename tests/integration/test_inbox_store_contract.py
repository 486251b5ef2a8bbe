"""The inbox store contract (tests/support/contracts/inbox_store_contract.py) run against
``InboxStore`` on the session's Cassandra keyspace (``feed_inbox``); tests/unit/
test_inbox_store_contract.py runs the same tests against the in-memory store. Every
test writes under fresh reader ids: the table is shared by the session's tests."""
from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from cassandra.cluster import Session

from services.fanout.inbox import InboxStore
from services.shared.contracts.serving_changes import ChangeSink
from services.shared.stores.cql_async import CqlRunner
from services.shared.stores.write_coalescer import WriteCoalescer
from tests.support.contracts.inbox_store_contract import InboxStoreContract, InboxSubject

pytestmark = pytest.mark.integration


class TestCassandraInboxStore(InboxStoreContract):
    """Pushes batched post by post and each cap check its own read (``fanout_coalesce_s``
    < 0), and joined with other posts' rows and reads by the fan-out's ``WriteCoalescer``
    and ``PartitionReads`` (the default)."""

    @pytest.fixture(params=["own batches", "coalesced"])
    def subject(self, cassandra: Session, request: pytest.FixtureRequest) -> Iterator[InboxSubject]:
        runner = CqlRunner(cassandra)
        coalesced = request.param == "coalesced"
        writes = WriteCoalescer(runner) if coalesced else None

        def factory(*, cap: int, trim_every: int, notices: ChangeSink) -> InboxStore:
            return InboxStore(cassandra, runner, max_in_flight=16, cap=cap, trim_every=trim_every,
                              notices=notices, writes=writes,
                              read_linger_s=0.001 if coalesced else None)

        loop = asyncio.new_event_loop()
        try:
            yield InboxSubject(factory, loop.run_until_complete)
        finally:
            loop.close()
