"""The inbox store contract (tests/support/contracts/inbox_store_contract.py) run against
the in-memory store the unit tests use; tests/integration/test_inbox_store_contract.py
runs the same tests against ``InboxStore`` on Cassandra."""
from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from services.shared.contracts.serving_changes import ChangeSink
from tests.support.contracts.inbox_store_contract import InboxStoreContract, InboxSubject
from tests.support.memory_stores import InMemoryInboxStore


class TestInMemoryInboxStore(InboxStoreContract):
    @pytest.fixture
    def subject(self) -> Iterator[InboxSubject]:
        def factory(*, cap: int, trim_every: int, notices: ChangeSink) -> InMemoryInboxStore:
            return InMemoryInboxStore(cap=cap, trim_every=trim_every, notices=notices)

        loop = asyncio.new_event_loop()
        try:
            yield InboxSubject(factory, loop.run_until_complete)
        finally:
            loop.close()
