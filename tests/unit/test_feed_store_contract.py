"""The read path's store contract (tests/support/contracts/feed_store_contract.py) run
against the in-memory store the unit tests use; tests/integration/
test_feed_store_contract.py runs the same tests against ``FeedStore`` on Cassandra."""
from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from datetime import datetime

import pytest

from services.shared.domain.rules import VISIBLE
from tests.support.contracts.feed_store_contract import FeedStoreContract, FeedSubject
from tests.support.memory_stores import InMemoryFeedStore, InMemoryInboxStore, to_ms


class MemoryWriter:
    """``FeedWriter`` on the in-memory store's seeding methods (times as ms cells)."""

    def __init__(self, store: InMemoryFeedStore) -> None:
        self._store = store

    def follow(self, reader_id: int, author_id: int, since: datetime) -> None:
        self._store.follow(reader_id, author_id, to_ms(since))

    def unfollow(self, reader_id: int, author_id: int) -> None:
        self._store.unfollow(reader_id, author_id)

    def block(self, blocker_id: int, blocked_id: int) -> None:
        self._store.block(blocker_id, blocked_id)

    def mute(self, muter_id: int, muted_id: int) -> None:
        self._store.mute(muter_id, muted_id)

    def write_post(self, post_id: int, author_id: int, created_at: datetime, text: str,
                   visibility: int = VISIBLE, deleted: bool = False,
                   media: Sequence[str] = ()) -> None:
        self._store.write_post(post_id, author_id, to_ms(created_at), text, visibility, deleted,
                               list(media))

    def like(self, post_id: int, user_id: int, liked: bool = True) -> None:
        self._store.like(post_id, user_id, liked)

    def set_rank_key(self, post_id: int, rank_key: float, key_ts: int) -> None:
        self._store.set_rank_key(post_id, rank_key, key_ts)

    def set_rank_key_next(self, post_id: int, rank_key: float, key_ts: int) -> None:
        self._store.set_rank_key_next(post_id, rank_key, key_ts)

    def add_author_post(self, author_id: int, post_id: int, rank_key: float, key_ts: int) -> None:
        self._store.add_author_post(author_id, post_id, rank_key, key_ts)

    def remove_author_post(self, author_id: int, post_id: int, rank_key: float, ts: int) -> None:
        self._store.remove_author_post(author_id, post_id, rank_key, ts)

    def promote(self, author_id: int, at: datetime) -> None:
        self._store.promote(author_id)

    def demote(self, author_id: int, at: datetime) -> None:
        self._store.demote(author_id, to_ms(at))


class TestInMemoryFeedStore(FeedStoreContract):
    @pytest.fixture
    def subject(self) -> Iterator[FeedSubject]:
        store = InMemoryFeedStore()
        loop = asyncio.new_event_loop()
        try:
            yield FeedSubject(store, InMemoryInboxStore(store.tables), MemoryWriter(store),
                              loop.run_until_complete)
        finally:
            loop.close()


def test_a_limit_of_zero_is_refused_as_cassandra_refuses_it() -> None:
    store = InMemoryFeedStore()
    for read in (store.following(1, 0), store.following_from(1, 0, 0), store.inbox_top(1, 0),
                 store.authors_top([1], [1], 0)):
        with pytest.raises(ValueError):
            asyncio.run(read)
