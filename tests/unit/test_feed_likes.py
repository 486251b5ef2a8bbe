"""A page's likes (services/api/copies/likes.py): one read of each kind per page, made
together for the window, counts kept ``ttl_s``; a failed read nulls the fields and says
so; the page body keeps to ``FeedPageOut``. On the in-memory store, counting its calls."""
from __future__ import annotations

import asyncio
from datetime import datetime, timezone
from typing import Sequence

import orjson
from prometheus_client import CollectorRegistry

from services.api.copies.bodies import BodyCache, PostCopies
from services.api.copies.likes import LikeCounts, PageLikes
from services.api.feed.metrics import FeedMetrics
from services.api.feed.reader import FeedReader
from services.api.routes.feed import FeedItemOut, FeedPageOut, page_json
from services.shared.domain import ids
from services.shared.domain.rules import VISIBLE
from services.shared.settings import ApiProcess
from tests.support.memory_stores import InMemoryFeedStore

READER, AUTHOR = 7, 11
NOW = datetime(2026, 3, 1, 12, tzinfo=timezone.utc)
NOW_MS = int(NOW.timestamp() * 1000)


class CountingStore(InMemoryFeedStore):
    """Counts ``like_counts`` calls and the posts each asked for; ``fail`` makes them raise."""

    def __init__(self) -> None:
        super().__init__()
        self.count_calls: list[list[int]] = []
        self.fail = False

    async def like_counts(self, post_ids: Sequence[int]) -> dict[int, int]:
        self.count_calls.append(list(post_ids))
        if self.fail:
            raise TimeoutError("count read timed out")
        return await super().like_counts(post_ids)


class LikedReads:
    """The reader's likes (Postgres in the app), counting calls."""

    def __init__(self, liked: set[int]) -> None:
        self.liked = liked
        self.calls: list[tuple[int, list[int]]] = []
        self.fail = False

    async def __call__(self, reader_id: int, post_ids: Sequence[int]) -> set[int]:
        self.calls.append((reader_id, list(post_ids)))
        if self.fail:
            raise ConnectionError("postgres is away")
        return self.liked & set(post_ids)


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def world(posts: int) -> tuple[CountingStore, list[int]]:
    store = CountingStore()
    store.follow(READER, AUTHOR, 0)
    made = []
    for i in range(posts):
        at = NOW_MS - 60_000 * (i + 1)
        post = ids.compose(at, 1, i)
        store.write_post(post, AUTHOR, at, f"post {i}", VISIBLE, False, [f"m{i}"] if i % 2 else None)
        store.set_rank_key(post, float(1000 - i), 1)
        store.add_author_post(AUTHOR, post, float(1000 - i))
        made.append(post)
    store.put_inbox(READER, [(float(1000 - i), p, AUTHOR) for i, p in enumerate(made)])
    return store, made


def reader(store: CountingStore, liked: LikedReads, clock: Clock) -> FeedReader:
    settings = ApiProcess(snapshot_reuse_s=0)
    likes = PageLikes(LikeCounts(store, ttl_s=5.0, monotonic=clock), liked)
    return FeedReader(store, PostCopies(store, BodyCache(1000)), settings,
                      FeedMetrics(CollectorRegistry()), lambda: NOW, likes=likes)


def test_a_page_reads_counts_and_likes_once_each_and_its_items_carry_them() -> None:
    store, posts = world(30)
    for user in (1, 2, 3):
        store.like(posts[0], user)
    store.like(posts[1], READER)
    liked, clock = LikedReads({posts[1]}), Clock()
    feed = reader(store, liked, clock)
    page = asyncio.run(feed.first_page(READER, 20))
    assert [i.entry.post_id for i in page.items] == posts[:20]
    assert len(store.count_calls) == 1 and len(liked.calls) == 1  # one read per kind per page
    assert set(store.count_calls[0]) >= set(posts[:20])
    assert liked.calls[0][0] == READER and liked.calls[0][1] == store.count_calls[0]
    first, second, third = page.items[:3]
    assert (first.like_count, first.liked, first.body.media_ids) == (3, False, ())
    assert (second.like_count, second.liked, second.body.media_ids) == (1, True, ("m1",))
    assert (third.like_count, third.liked) == (0, False)
    body = orjson.loads(page_json(page))
    FeedPageOut.model_validate(body)
    assert all(set(item) == set(FeedItemOut.model_fields) for item in body["items"])
    assert body["items"][1]["media_ids"] == ["m1"] and body["items"][1]["liked"] is True
    # The next page: counts of posts already counted are kept; liked is read again.
    nxt = asyncio.run(feed.next_page(READER, 20, page.next_cursor or ""))
    assert [i.entry.post_id for i in nxt.items] == posts[20:]
    assert len(liked.calls) == 2
    asked_again = [p for call in store.count_calls[1:] for p in call]
    assert not set(asked_again) & set(store.count_calls[0])


def test_counts_are_kept_ttl_s_and_read_in_chunks_together() -> None:
    store, posts = world(0)[0], [ids.compose(NOW_MS, 1, i) for i in range(120)]
    store.like(posts[0], 1)
    clock = Clock()
    counts = LikeCounts(store, ttl_s=5.0, monotonic=clock)
    got = asyncio.run(counts.counts(posts))
    assert got[posts[0]] == 1 and got[posts[1]] == 0 and len(got) == 120
    assert [len(c) for c in store.count_calls] == [50, 50, 20]  # IN reads of CHUNK posts
    store.like(posts[0], 2)
    assert asyncio.run(counts.counts(posts[:1])) == {posts[0]: 1}  # kept: no read
    assert len(store.count_calls) == 3
    clock.t += 5.0
    assert asyncio.run(counts.counts(posts[:1])) == {posts[0]: 2}  # expired: read again
    assert len(store.count_calls) == 4


def test_a_failed_read_nulls_its_fields_and_the_page_says_likes_unavailable() -> None:
    for failing in ("counts", "liked"):
        store, posts = world(5)
        liked, clock = LikedReads(set(posts)), Clock()
        store.fail, liked.fail = failing == "counts", failing == "liked"
        page = asyncio.run(reader(store, liked, clock).first_page(READER, 5))
        assert [i.entry.post_id for i in page.items] == posts  # the page is served anyway
        assert "likes_unavailable" in page.warnings
        if failing == "counts":
            assert all(i.like_count is None and i.liked is True for i in page.items)
        else:
            assert all(i.like_count == 0 and i.liked is None for i in page.items)
        FeedPageOut.model_validate(orjson.loads(page_json(page)))


def test_without_likes_wired_items_carry_no_like_fields_read() -> None:
    store, posts = world(3)
    settings = ApiProcess(snapshot_reuse_s=0)
    feed = FeedReader(store, PostCopies(store, BodyCache(100)), settings,
                      FeedMetrics(CollectorRegistry()), lambda: NOW)
    page = asyncio.run(feed.first_page(READER, 5))
    assert [(i.like_count, i.liked) for i in page.items] == [(None, None)] * 3
    assert store.count_calls == []


# -- ReaderLikes: the posts each reader liked, kept per process --------------------------
class LikesTruth:
    """Postgres's ``likes`` as the two reads see it, counting each."""

    def __init__(self, liked: dict[int, set[int]]) -> None:
        self.liked = liked
        self.recent_calls: list[int] = []
        self.among_calls: list[list[int]] = []
        self.gate: asyncio.Event | None = None

    async def recent(self, reader: int, since_s: float, limit: int) -> list[int]:
        self.recent_calls.append(reader)
        seen = [p for p in sorted(self.liked.get(reader, set()))
                if ids.timestamp_ms(p) >= since_s * 1000][:limit]
        if self.gate is not None:   # the answer is on its way back
            await self.gate.wait()
        return seen

    async def among(self, reader: int, post_ids: Sequence[int]) -> set[int]:
        self.among_calls.append(list(post_ids))
        return set(post_ids) & self.liked.get(reader, set())


def _reader_likes(truth: LikesTruth, clock: list[float], **kw: object) -> "ReaderLikes":
    from services.api.copies.likes import ReaderLikes
    return ReaderLikes(truth.recent, truth.among, 60.0, 86400.0, monotonic=lambda: clock[0],
                       wall=lambda: NOW_MS / 1000, **kw)  # type: ignore[arg-type]


def _post(age_s: float, seq: int = 0) -> int:
    return ids.compose(NOW_MS - int(age_s * 1000), 1, seq)


def test_a_readers_likes_are_read_once_then_kept_until_their_time_or_a_drop() -> None:
    fresh, other = _post(60), _post(120)
    truth, clock = LikesTruth({READER: {fresh}}), [0.0]
    likes = _reader_likes(truth, clock)

    async def go() -> None:
        assert await likes.liked_among(READER, [fresh, other]) == {fresh}
        assert await likes.liked_among(READER, [other, fresh]) == {fresh}
        assert truth.recent_calls == [READER] and truth.among_calls == []
        truth.liked[READER] = {other}          # liked elsewhere: kept until the drop
        likes.drop((READER,))                  # the like route, or its notice
        assert await likes.liked_among(READER, [fresh, other]) == {other}
        clock[0] = 61.0                        # past ttl_s: read again
        await likes.liked_among(READER, [fresh])
        assert truth.recent_calls == [READER] * 3
    asyncio.run(go())


def test_a_load_in_flight_when_a_drop_comes_is_not_kept() -> None:
    post = _post(60)
    truth, clock = LikesTruth({READER: set()}), [0.0]
    likes = _reader_likes(truth, clock)

    async def go() -> None:
        truth.gate = asyncio.Event()
        loading = asyncio.ensure_future(likes.liked_among(READER, [post]))
        await asyncio.sleep(0)
        likes.drop((READER,))                  # the reader liked while the load was out
        truth.liked[READER] = {post}
        truth.gate.set()
        assert await loading == set()          # what the load saw, used once...
        assert await likes.liked_among(READER, [post]) == {post}   # ...never kept
        assert truth.recent_calls == [READER, READER]
    asyncio.run(go())


def test_old_posts_and_heavy_likers_are_asked_per_window() -> None:
    recent, old = _post(60), _post(2 * 86400)
    truth, clock = LikesTruth({READER: {recent, old}, AUTHOR: {_post(i, i) for i in range(1, 9)}}), [0.0]
    likes = _reader_likes(truth, clock, cap=5)

    async def go() -> None:
        # Before the kept set's horizon: its own query, for the old post only.
        assert await likes.liked_among(READER, [recent, old]) == {recent, old}
        assert truth.among_calls == [[old]]
        # More likes than the cap: nothing kept, each window asks for itself.
        some = sorted(truth.liked[AUTHOR])[:3]
        assert await likes.liked_among(AUTHOR, some) == set(some)
        assert await likes.liked_among(AUTHOR, some) == set(some)
        assert truth.among_calls[1:] == [some, some]
    asyncio.run(go())


def test_held_among_answers_from_the_kept_set_only_within_its_horizon() -> None:
    recent, old = _post(60), _post(2 * 86400)
    edge = ids.lowest_id_at(NOW_MS - 86400 * 1000)   # the first id the horizon covers
    truth, clock = LikesTruth({READER: {recent, edge}}), [0.0]
    likes = _reader_likes(truth, clock)
    assert likes.held_among(READER, [recent]) is None          # nothing kept yet
    asyncio.run(likes.liked_among(READER, [recent]))
    assert likes.held_among(READER, [recent, edge]) == {recent, edge}
    assert likes.held_among(READER, [recent, edge - 1]) is None   # one id before the horizon
    assert likes.held_among(READER, [old]) is None
    assert likes.held_among(READER, []) == set()
    clock[0] = 61.0
    assert likes.held_among(READER, [recent]) is None          # past ttl_s
    assert truth.among_calls == []


def test_a_cleared_serving_cache_forgets_every_reader() -> None:
    post = _post(60)
    truth, clock = LikesTruth({READER: {post}, AUTHOR: set()}), [0.0]
    likes = _reader_likes(truth, clock)

    async def go() -> None:
        await likes.liked_among(READER, [post])
        await likes.liked_among(AUTHOR, [post])
        likes.drop(None)
        await likes.liked_among(READER, [post])
        await likes.liked_among(AUTHOR, [post])
        assert truth.recent_calls == [READER, AUTHOR, READER, AUTHOR]
    asyncio.run(go())


def test_a_likers_notice_reaches_the_kept_likes_and_round_trips() -> None:
    from services.api.copies.serving_cache import ServingCache
    from services.shared.contracts import serving_changes
    from services.shared.contracts.serving_changes import ServingChange

    post = _post(60)
    truth, clock = LikesTruth({READER: set()}), [0.0]
    likes = _reader_likes(truth, clock)
    cache = ServingCache(posts=10, follows=10, timelines=10, inboxes=10, ttl_s=1, max_silence_s=5)
    cache.liker_listeners.append(likes.drop)

    async def go() -> None:
        assert await likes.liked_among(READER, [post]) == set()
        truth.liked[READER] = {post}           # liked through another API process
        key, value = serving_changes.encode(ServingChange(likers=(READER,)))
        change = serving_changes.parse(value)
        assert change == ServingChange(likers=(READER,)) and key == str(READER).join('""').encode()
        cache.apply(change)
        assert await likes.liked_among(READER, [post]) == {post}
    asyncio.run(go())
