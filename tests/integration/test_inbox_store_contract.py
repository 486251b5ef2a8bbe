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
from services.shared.settings import Settings
from services.shared.stores import cql
from services.shared.stores.cql_async import CqlRunner
from tests.support.contracts.inbox_store_contract import InboxStoreContract, InboxSubject

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cassandra(settings: Settings) -> Iterator[Session]:
    session = cql.session(settings)
    yield session
    session.cluster.shutdown()


class TestCassandraInboxStore(InboxStoreContract):
    @pytest.fixture
    def subject(self, cassandra: Session) -> Iterator[InboxSubject]:
        runner = CqlRunner(cassandra)

        def factory(*, cap: int, trim_every: int, notices: ChangeSink) -> InboxStore:
            return InboxStore(cassandra, runner, max_in_flight=16, cap=cap, trim_every=trim_every,
                              notices=notices)

        loop = asyncio.new_event_loop()
        try:
            yield InboxSubject(factory, loop.run_until_complete)
        finally:
            loop.close()
