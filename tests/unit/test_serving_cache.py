"""The serving cache's rules (services/api/copies/serving_cache.py) and the notices that
drive it (services/shared/contracts/serving_changes.py), over the in-memory store counting the
reads the cache lets through (tests/support/serving_cache_fakes.py)."""
from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass

import pytest

from services.api.copies.bodies import BodyCache, PostCopies
from services.api.copies.notices import NoticeStats, _apply
from services.api.copies.serving_cache import ServingCache
from services.api.copies.store import NO_BLOCKS
from services.shared.contracts.envelope import MalformedEnvelope
from services.shared.contracts.serving_changes import MAX_IDS, ServingChange, encode, parse, split
from services.shared.domain.rules import VISIBLE
from services.shared.worker.notices import Notices
from tests.support.schemas import examples_for, validation_errors
from tests.support.serving_cache_fakes import (AUTHOR, BUCKET, INBOX, OTHER, POST, READER, TIMELINE,
                                               Clock, FakeStore, make, run)


def views(cache: ServingCache, store: FakeStore) -> PostCopies:
    return PostCopies(store, BodyCache(10), cache)


def test_a_warm_page_reads_nothing_from_the_store():
    cached, store, cache, _ = make()
    copies = views(cache, store)
    for _ in range(2):
        assert run(cached.following_among(READER, [AUTHOR, 99])) == {AUTHOR: 5}
        assert run(cached.blocks(READER)).blocked == frozenset()
        assert run(cached.following_from(READER, AUTHOR + 1, 5)) == {OTHER: 6}
        fetched = run(copies.fetch([POST]))
        assert fetched.views[POST].body.text == "hi" and not fetched.failed
        assert run(cached.authors_top([AUTHOR], [BUCKET], 1)) == [(2.0, POST, AUTHOR)]
    assert sorted(store.calls) == ["authors_top", "blocks", "following", "posts:True"]


def test_a_notice_drops_exactly_what_it_names():
    cached, store, cache, _ = make()
    copies = views(cache, store)
    run(cached.blocks(READER))
    run(copies.fetch([POST]))
    store.block(READER, AUTHOR)
    store.write_post(POST, AUTHOR, 7, "hi", VISIBLE, deleted=True)
    assert run(cached.blocks(READER)).blocked == frozenset()  # no notice yet: still the cached copy
    cache.apply(ServingChange(graphs=(READER,), posts=(POST,)))
    assert run(cached.blocks(READER)).blocked == frozenset({AUTHOR})
    assert run(copies.fetch([POST])).views[POST].state.deleted is True


def test_the_cached_graph_keeps_blocks_and_mutes_apart():
    cached, store, cache, _ = make()
    store.mute(READER, AUTHOR)
    store.block(OTHER, READER)
    for _ in range(2):  # the store's answer, then the cache's
        blocks = run(cached.blocks(READER))
        assert (blocks.blocked, blocks.muted, blocks.hidden) == (
            frozenset({OTHER}), frozenset({AUTHOR}), frozenset({OTHER, AUTHOR}))
        assert run(cached.hidden_between(READER, AUTHOR)) and run(cached.hidden_between(READER, OTHER))
        # One way: the muted author's partition holds no row of the mute.
        assert not run(cached.hidden_between(AUTHOR, READER))
        assert run(cached.blocks(AUTHOR)).hidden == frozenset()
    assert store.calls.count("following") == 2  # the reader's and the author's graphs
    # A reader without blocks or mutes shares one empty value: nothing held per reader.
    assert run(cached.blocks(44)) is run(cached.blocks(55)) is NO_BLOCKS


def test_a_read_that_overlapped_a_notice_is_not_stored():
    cached, store, cache, _ = make()

    async def scenario():
        store.gate = asyncio.Event()
        slow = asyncio.ensure_future(cached.blocks(READER))
        await asyncio.sleep(0)
        cache.apply(ServingChange(graphs=(READER,)))  # arrives while the read is out
        store.gate.set()
        await slow
        store.gate = None
        await cached.blocks(READER)

    run(scenario())
    assert store.calls.count("following") == 2 and cache.stale_fills == 1


def test_a_fill_survives_notices_about_other_keys_but_not_a_clear():
    cached, store, cache, _ = make()

    async def overlapped(change):
        store.gate = asyncio.Event()
        slow = asyncio.ensure_future(cached.blocks(READER))
        await asyncio.sleep(0)
        change()
        store.gate.set()
        await slow
        store.gate = None

    run(overlapped(lambda: cache.apply(ServingChange(graphs=(OTHER,), posts=(READER,)))))
    assert len(cache.graphs) == 1  # another user's graph and a post: this fill is fine
    cache.apply(ServingChange(graphs=(READER,)))
    run(overlapped(cache.clear))
    assert len(cache.graphs) == 0 and cache.stale_fills == 1


def test_the_cache_stands_aside_until_live_and_when_notices_go_quiet():
    cached, store, cache, clock = make(live=False)
    run(cached.blocks(READER))
    run(cached.blocks(READER))
    assert store.calls == ["blocks", "blocks"] and len(cache.graphs) == 0
    cache.go_live({0: 5})
    run(cached.blocks(READER))
    run(cached.blocks(READER))
    assert store.calls.count("following") == 1
    clock.t += 3  # longer than max_silence_s without a fetch answer
    assert not cache.usable
    run(cached.blocks(READER))
    assert store.calls[-1] == "blocks"
    cache.stand_aside()
    assert not cache.usable and len(cache.graphs) == 0


def test_a_failed_post_read_gets_the_last_known_state_for_a_while_after_the_cache_stood_aside():
    clock = Clock()
    cache = ServingCache(posts=100, follows=100, timelines=100, inboxes=100, ttl_s=60,
                         max_silence_s=2, stale_if_error_s=30, monotonic=clock)
    cache.go_live({0: 0})
    store = FakeStore()
    copies = views(cache, store)
    assert POST in run(copies.fetch([POST])).views  # cached while live
    cache.stand_aside()  # the notice consumer went quiet
    assert not cache.usable and len(cache.posts) == 0

    async def failing(post_ids, *, with_text):
        raise TimeoutError("no node answered the read in time")

    good = store.posts
    store.posts = failing  # type: ignore[method-assign]
    got = run(copies.fetch([POST, POST - 1]))
    assert set(got.views) == {POST} and got.failed == {POST - 1} and got.stale == 1
    assert cache.stale_served == 1
    store.posts = good  # type: ignore[method-assign]
    fresh = run(copies.fetch([POST]))
    assert POST in fresh.views and fresh.stale == 0  # a read that works never sees them
    store.posts = failing  # type: ignore[method-assign]
    _apply(cache, NoticeStats(), encode(ServingChange(posts=(POST,)))[1])  # a notice still drops it
    assert run(copies.fetch([POST])).failed == {POST}
    cache.go_live({0: 0})  # a live consumer starts empty, and nothing stale is kept
    cache.stand_aside()
    assert run(copies.fetch([POST])).failed == {POST}
    # Too old: after stale_if_error_s, a failed read is a failed read.
    cache2 = ServingCache(posts=100, follows=100, timelines=100, inboxes=100, ttl_s=60,
                          max_silence_s=2, stale_if_error_s=30, monotonic=clock)
    cache2.go_live({0: 0})
    store2 = FakeStore()
    copies2 = views(cache2, store2)
    run(copies2.fetch([POST]))
    cache2.stand_aside()
    cache2.stand_aside()  # a restart loop stands aside again: what was kept stays kept
    store2.posts = failing  # type: ignore[method-assign]
    assert run(copies2.fetch([POST])).stale == 1
    clock.t += 31
    assert run(copies2.fetch([POST])).failed == {POST}
    # Silent, not stopped: the consumer heard nothing for max_silence_s, the entries stay
    # in place unused, and answer failed reads until stale_if_error_s after the last word.
    cache3 = ServingCache(posts=100, follows=100, timelines=100, inboxes=100, ttl_s=60,
                          max_silence_s=2, stale_if_error_s=30, monotonic=clock)
    cache3.go_live({0: 0})
    store3 = FakeStore()
    copies3 = views(cache3, store3)
    run(copies3.fetch([POST]))
    clock.t += 3
    assert not cache3.usable
    store3.posts = failing  # type: ignore[method-assign]
    assert run(copies3.fetch([POST])).stale == 1
    clock.t += 28
    assert run(copies3.fetch([POST])).failed == {POST}


def test_entries_expire_after_the_ttl():
    _, store, cache, clock = make()
    copies = views(cache, store)
    run(copies.fetch([POST]))
    clock.t += 61
    cache.heard()
    run(copies.fetch([POST]))
    assert store.calls == ["posts:True", "posts:False"]  # state re-read, body still cached


def test_a_follow_list_at_the_read_bound_is_never_cached():
    cached, store, cache, _ = make(max_following=2)
    run(cached.following_among(READER, [AUTHOR]))
    run(cached.following_among(READER, [AUTHOR]))
    assert len(cache.graphs) == 0
    assert store.calls.count("following_among") == 2


def test_graphs_are_evicted_by_follow_entries():
    cached, store, cache, _ = make(follows=4)  # one graph of 2 follows weighs 3
    store.follow(OTHER, 1, 1)
    run(cached.blocks(READER))
    run(cached.blocks(OTHER))
    assert len(cache.graphs) == 1 and cache.graphs.load <= 4


def test_timelines_cache_empty_partitions_and_answer_smaller_limits():
    cached, store, _, _ = make()
    assert run(cached.authors_top([AUTHOR, OTHER], [BUCKET, BUCKET - 1], 5)) == TIMELINE
    assert run(cached.authors_top([OTHER], [BUCKET], 3)) == []
    assert run(cached.authors_top([AUTHOR], [BUCKET], 1)) == [(2.0, POST, AUTHOR)]
    assert store.calls == ["authors_top"]
    run(cached.authors_top([AUTHOR], [BUCKET], 1, after=(3.0, POST)))
    assert store.calls[-1] == "authors_after"


def test_a_full_partition_does_not_answer_a_larger_limit():
    cached, store, _, _ = make()
    run(cached.authors_top([AUTHOR], [BUCKET], 1))
    assert len(run(cached.authors_top([AUTHOR], [BUCKET], 2))) == 2
    assert store.calls == ["authors_top", "authors_top"]


def test_inbox_tops_are_cached_packed_and_dropped_by_an_inbox_notice():
    cached, store, cache, _ = make()
    assert run(cached.inbox_top(READER, 10)) == INBOX
    assert run(cached.inbox_top(READER, 1)) == INBOX[:1]
    assert run(cached.inbox_top(READER, 50)) == INBOX  # complete: answers more
    assert store.calls == ["inbox_top"]
    store.set_inbox(READER, INBOX[1:])
    cache.apply(ServingChange(inboxes=(READER,)))
    assert run(cached.inbox_top(READER, 10)) == INBOX[1:]
    run(cached.inbox_top(READER, 10, after=(1.0, 1)))
    assert store.calls == ["inbox_top", "inbox_top", "inbox_after"]


def test_a_full_inbox_top_does_not_answer_a_deeper_read():
    cached, store, _, _ = make()
    run(cached.inbox_top(READER, 2))
    run(cached.inbox_top(READER, 3))
    assert store.calls == ["inbox_top", "inbox_top"]


def test_uncached_calls_go_to_the_store():
    cached, store, _, _ = make()
    run(cached.load_snapshot(READER, "v"))
    run(cached.posts([POST], with_text=False))  # rows in doubt: always the current copy
    assert store.calls == ["load_snapshot", "posts:False"]


def test_reads_are_awaited_in_turn_only_while_the_cache_answers():
    cached, _, cache, _ = make()
    assert cached.from_memory
    cache.stand_aside()
    assert not cached.from_memory


# -- notices ---------------------------------------------------------------------------------
def test_notices_round_trip_and_conform_to_the_schema():
    change = ServingChange(posts=(POST,), graphs=(READER, AUTHOR), timelines=((AUTHOR, BUCKET),),
                           inboxes=(READER,), preferences=(OTHER,), profiles=(AUTHOR,),
                           likers=(READER,), accounts=(AUTHOR,))
    key, value = encode(change)
    assert parse(value) == change
    assert validation_errors("serving-changes", json.loads(key), json.loads(value)) == []
    for ex in examples_for("serving-changes"):
        assert validation_errors("serving-changes", ex.key, ex.value) == [], ex.name
        assert parse(json.dumps(ex.value).encode())


def test_wide_changes_are_split_under_the_id_bound():
    change = ServingChange(posts=tuple(range(1, MAX_IDS * 2 + 2)))
    parts = list(split(change))
    assert len(parts) == 3 and sum(len(p.posts) for p in parts) == MAX_IDS * 2 + 1


@pytest.mark.parametrize("bad", [b"[]", b'{"posts": [1]}', b'{"posts": ["x"]}', b"nope",
                                 b'{"timelines": [["1"]]}', b'{"other": ["1"]}'])
def test_malformed_notices_are_refused(bad):
    with pytest.raises(MalformedEnvelope):
        parse(bad)


def test_a_malformed_notice_clears_the_whole_cache():
    cached, _, cache, _ = make()
    run(cached.blocks(READER))
    stats = NoticeStats()
    _apply(cache, stats, b"not json")
    assert stats.malformed == 1 and len(cache.graphs) == 0
    _apply(cache, stats, encode(ServingChange(posts=(POST,)))[1])
    assert stats.applied == 1


@dataclass
class _Meta:
    partition: int
    offset: int


class _Publisher:
    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes, bytes]] = []

    async def send(self, topic, key, value):
        self.sent.append((topic, key, value))
        fut = asyncio.get_running_loop().create_future()
        fut.set_result(_Meta(len(self.sent) % 2, len(self.sent)))
        return fut


def test_notices_wait_for_the_broker_and_remember_how_far_they_got():
    publisher = _Publisher()
    notices = Notices(publisher, "t")
    run(notices.changed(ServingChange()))
    assert publisher.sent == []
    run(notices.changed(ServingChange(posts=(1,))))
    run(notices.changed(ServingChange(graphs=(2,))))
    assert notices.delivered == {1: 2, 0: 3} and notices.sent == 2


def test_post_copies_answered_with_rows_of_another_request_count_as_a_failed_read() -> None:
    from services.api.copies.bodies import BodyCache, PostCopies

    class Store:
        def __init__(self, rows):
            self.rows = rows

        async def posts(self, post_ids, *, with_text):
            return self.rows

    asked = [POST, POST - 1]
    for rows in ([(3.5, POST, AUTHOR)],  # an inbox read's rows
                 [(POST - 9, AUTHOR, 1_000, 1, False, 2.5, None, 7, "other post")]):
        got = asyncio.run(PostCopies(Store(rows), BodyCache(10)).fetch(asked))  # type: ignore[arg-type]
        assert got.views == {} and got.failed == set(asked)
    good = [(POST, AUTHOR, 1_000, 1, False, 2.5, None, 7, "text")]
    got = asyncio.run(PostCopies(Store(good), BodyCache(10)).fetch(asked))  # type: ignore[arg-type]
    assert set(got.views) == {POST} and got.failed == set()


# -- preferences -----------------------------------------------------------------------------
def test_a_preference_is_read_once_and_kept_until_a_notice_names_its_reader():
    from services.api.feed.preferences import Preferences

    cached, store, cache, clock = make()
    sent: list[ServingChange] = []

    class Sink:
        async def changed(self, change: ServingChange) -> None:
            sent.append(change)

    prefs = Preferences(cached, ttl_s=5, monotonic=clock, notices=Sink())  # type: ignore[arg-type]
    assert run(prefs.feed_order(READER)) == "ranked"  # nothing stored: read once, kept
    clock.t += 30  # far past the 5 s the process alone would keep it
    cache.heard()  # the notice consumer is still current
    assert run(prefs.feed_order(READER)) == "ranked"
    assert store.calls == ["feed_order"]
    store.tables.preferences[READER] = "latest"  # stored through another process ...
    assert run(prefs.feed_order(READER)) == "ranked"
    cache.apply(ServingChange(preferences=(READER,)))  # ... whose notice arrives
    assert run(prefs.feed_order(READER)) == "latest" and store.calls == ["feed_order"] * 2
    run(prefs.set_feed_order(READER, "ranked"))  # stored here: announced, used at once
    assert sent == [ServingChange(preferences=(READER,))]
    assert run(prefs.feed_order(READER)) == "ranked"
    cache.apply(ServingChange(inboxes=(READER,), graphs=(READER,)))  # other kinds: kept
    assert run(prefs.feed_order(READER)) == "ranked" and store.calls.count("feed_order") == 3


def test_a_preference_read_overlapping_its_notice_is_not_kept():
    cached, store, cache, _ = make()

    async def overlapped() -> str | None:
        store.gate = asyncio.Event()
        read = asyncio.ensure_future(cached.feed_order(READER))
        await asyncio.sleep(0)
        store.tables.preferences[READER] = "latest"  # stored through another process
        cache.apply(ServingChange(preferences=(READER,)))  # arrives while the read is out
        store.gate.set()
        return await read

    assert run(overlapped()) is None  # what the read saw ...
    store.gate = None
    assert run(cached.feed_order(READER)) == "latest"  # ... was not kept
    assert cache.stale_fills == 1


def test_preferences_are_read_through_while_the_cache_stands_aside():
    cached, store, cache, _ = make(live=False)
    store.tables.preferences[READER] = "latest"
    assert [run(cached.feed_order(READER)) for _ in range(2)] == ["latest", "latest"]
    assert store.calls == ["feed_order", "feed_order"] and len(cache.preferences) == 0


def test_held_answers_are_the_cached_ones_and_never_read():
    """The read path's synchronous checks (``held_graph``, ``PostCopies.held``,
    ``PageGraph.covers``) answer what the awaited reads would, from the cache alone, and
    say None (read) when the cache cannot."""
    from services.api.feed.graph import PageGraph

    cached, store, cache, clock = make()
    copies = views(cache, store)
    store.mute(READER, OTHER)
    assert cached.held_graph(READER) is None and copies.held([POST]) is None  # nothing held yet
    assert not PageGraph(cached, READER).covers([AUTHOR])
    run(cached.blocks(READER))
    run(copies.fetch([POST]))
    calls = list(store.calls)
    following, blocks = cached.held_graph(READER)
    assert following == {AUTHOR: 5, OTHER: 6} and blocks.hidden == frozenset({OTHER})
    held = copies.held([POST])
    assert held is not None and held.views[POST].body.text == "hi" and not held.failed
    assert copies.held([POST, 999]) is None  # one post not held: the whole window reads
    graph = PageGraph(cached, READER)
    assert graph.covers([AUTHOR, 12345])  # the whole graph: exact for any author
    assert graph.graph.following_since_ms.get(AUTHOR) == 5 and graph.graph.blocked == {OTHER}
    run(graph.cover([AUTHOR, 777]))  # nothing more to read
    assert store.calls == calls
    cache.apply(ServingChange(graphs=(READER,), posts=(POST,)))
    assert cached.held_graph(READER) is None and copies.held([POST]) is None
    clock.t += 3  # notices quiet: the cache stands aside, nothing is held
    assert cached.held_graph(READER) is None


def test_a_page_graph_without_a_held_graph_reads_what_it_does_not_know():
    from services.api.feed.graph import PageGraph

    cached, store, cache, _ = make(live=False)
    graph = PageGraph(cached, READER, following={AUTHOR: 5}, asked=[AUTHOR], blocked=frozenset())
    assert graph.covers([AUTHOR]) and not graph.covers([AUTHOR, OTHER])
    run(graph.cover([AUTHOR, OTHER]))
    assert graph.covers([AUTHOR, OTHER]) and graph.graph.following_since_ms == {AUTHOR: 5, OTHER: 6}
