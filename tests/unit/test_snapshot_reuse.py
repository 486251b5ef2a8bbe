"""When a first page may show the reader's last snapshot again (services/api/feed/reuse.py):
the real SourceReader over the real serving cache, against the serving cache tests'
in-memory store (tests/support/serving_cache_fakes.py), so a snapshot is reused exactly
while what it was built from is unchanged."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

from services.api.feed import candidates as cand
from services.api.feed.reuse import SnapshotReuse
from services.shared.contracts.serving_changes import ServingChange
from services.shared.domain import ids
from tests.support.serving_cache_fakes import AUTHOR, BUCKET, OTHER, POST, READER, make, run

LIMITS = cand.Limits(depth=100, per_celebrity=20, max_celebrities=10, fallback_authors=16,
                     per_fallback_author=5)
NOW_MS = ids.timestamp_ms(POST) + 3_600_000  # an hour after the post: the same day bucket
NOW = datetime.fromtimestamp(NOW_MS / 1000, timezone.utc)


def build(cached, reuse: SnapshotReuse, celebrities=(), now_ms: int = NOW_MS) -> tuple[cand.Sources, bool]:
    """A first page's snapshot as FeedReader builds it, then offered to ``reuse``."""
    epoch = reuse.epoch
    sources, _ = run(cand.SourceReader(cached, LIMITS).first(
        READER, list(celebrities), cached.blocks(READER), cached.inbox_top(READER, 100), now_ms))
    kept = reuse.remember(READER, "ranked", epoch, sources, list(celebrities), now_ms, "v-1",
                          b"blob", NOW, True)
    return sources, kept


def recall(reuse: SnapshotReuse, *, now_ms: int = NOW_MS, celebrities=(), order: str = "ranked"):
    now = datetime.fromtimestamp(now_ms / 1000, timezone.utc)
    return reuse.recall(READER, order, now, now_ms, list(celebrities))


def setup(**kwargs):
    # The inbox's keys as the timeline's.
    cached, store, cache, clock = make(inbox=[(2.0, POST, AUTHOR), (1.25, POST - 5, OTHER)], **kwargs)
    return cached, store, cache, clock, SnapshotReuse(cache, max_age_s=300, size=100)


def test_a_snapshot_is_shown_again_until_a_notice_names_what_it_was_built_from() -> None:
    for change in (ServingChange(inboxes=(READER,)), ServingChange(graphs=(READER,)),
                   ServingChange(timelines=((AUTHOR, BUCKET),))):
        cached, store, cache, _, reuse = setup()
        sources, kept = build(cached, reuse)
        assert kept and sources.pure and sources.slice_start is None  # 2 follows: the whole list
        assert (AUTHOR, BUCKET) in sources.partitions and (OTHER, BUCKET) in sources.partitions
        calls = len(store.calls)
        assert recall(reuse).version == "v-1"
        assert len(store.calls) == calls  # recalling reads nothing
        # Notices about others (a post's state, another reader, another partition) keep it:
        # a post's state is checked on every page's window anyway.
        cache.apply(ServingChange(posts=(POST,), inboxes=(READER + 1,), graphs=(READER + 1,),
                                  timelines=((AUTHOR, BUCKET - 5),)))
        assert recall(reuse) is not None
        cache.apply(change)
        assert recall(reuse) is None, change
        assert recall(reuse) is None  # forgotten, even once the entry is filled again
        build(cached, reuse)
        assert recall(reuse) is not None


def test_not_shown_again_for_another_order_day_celebrity_list_or_after_the_max_age() -> None:
    cached, _, cache, _, reuse = setup()
    build(cached, reuse)
    assert recall(reuse, order="latest") is None
    assert recall(reuse, celebrities=[(OTHER, None)]) is None
    build(cached, reuse)
    assert recall(reuse, now_ms=NOW_MS + 86_400_000) is None  # tomorrow: other buckets
    build(cached, reuse)
    assert recall(reuse, now_ms=NOW_MS + 299_000) is not None
    assert recall(reuse, now_ms=NOW_MS + 301_000) is None


def test_a_cache_that_stands_aside_or_expires_its_entries_ends_reuse() -> None:
    cached, _, cache, clock, reuse = setup()
    build(cached, reuse)
    cache.stand_aside()
    assert recall(reuse) is None
    cache.go_live({0: 0})
    build(cached, reuse)
    clock.t += 61  # past the entries' TTL (60 s here)
    assert recall(reuse) is None


def test_a_long_follow_list_reuses_only_within_the_fallback_slices_second() -> None:
    cached, store, cache, _, reuse = setup()
    store.unfollow(READER, OTHER)  # READER follows AUTHOR and these 40 authors
    for author in range(AUTHOR + 100, AUTHOR + 140):
        store.follow(READER, author, 5)
    sources, kept = build(cached, reuse)
    assert kept and sources.slice_start == cand.fallback_start(NOW_MS)
    assert NOW_MS % 1000 == 0
    assert recall(reuse, now_ms=NOW_MS + 999) is not None  # the same slice
    assert recall(reuse, now_ms=NOW_MS + 1000) is None  # the next second's slice


def test_a_snapshot_built_across_a_notice_about_its_sources_is_not_held() -> None:
    cached, _, cache, _, reuse = setup()
    epoch = reuse.epoch
    sources, _ = run(cand.SourceReader(cached, LIMITS).first(
        READER, [], cached.blocks(READER), cached.inbox_top(READER, 100), NOW_MS))
    cache.apply(ServingChange(inboxes=(READER,)))  # arrived while the page was being built
    assert not reuse.remember(READER, "ranked", epoch, sources, [], NOW_MS, "v-1", b"b", NOW, True)
    assert recall(reuse) is None


def test_snapshots_with_failed_reads_or_rows_in_doubt_are_not_held() -> None:
    cached, store, cache, _, reuse = setup()

    async def broken(*_a, **_k):
        raise TimeoutError("a timeline read timed out")

    store.authors_top = broken  # type: ignore[method-assign]
    sources, kept = build(cached, reuse)
    assert sources.failed_sources == ["fallback"] and not sources.pure and not kept

    cached, store, cache, _, reuse = setup()
    # The post has an inbox row under another key than its timeline row: a move under way.
    store.set_inbox(READER, [(9.0, POST, AUTHOR)])
    sources, kept = build(cached, reuse)
    assert not sources.pure and not kept


def test_a_demoted_celebrity_merged_for_a_while_is_not_held() -> None:
    cached, _, _, _, reuse = setup()
    _, kept = build(cached, reuse, celebrities=[(AUTHOR, NOW_MS - 1000)])
    assert not kept
    _, kept = build(cached, reuse, celebrities=[(AUTHOR, None)])
    assert kept


def test_the_oldest_readers_are_forgotten_beyond_the_size() -> None:
    cached, _, cache, _, _ = setup()
    reuse = SnapshotReuse(cache, max_age_s=300, size=1)
    build(cached, reuse)
    sources = cand.Sources(pure=True)
    assert reuse.remember(READER + 1, "ranked", reuse.epoch, sources, [], NOW_MS, "v-2", b"b",
                          NOW, True) is False  # its inbox and graph are not in the cache
    run(cached.inbox_top(READER + 1, 100))
    run(cached.blocks(READER + 1))
    assert reuse.remember(READER + 1, "ranked", reuse.epoch, sources, [], NOW_MS, "v-2", b"b",
                          NOW, True)
    assert len(reuse) == 1 and recall(reuse) is None
    assert reuse.recall(READER + 1, "ranked", NOW + timedelta(seconds=1), NOW_MS, []) is not None
