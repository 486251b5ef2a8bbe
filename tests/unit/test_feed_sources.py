"""Building a snapshot from the top of each source: the pure merge, the fallback slice
and the live-row rule (services/api/feed/candidates.py, bodies.PostView)."""
from __future__ import annotations

from hypothesis import example, given
from hypothesis import strategies as st

from services.api.copies.post_view import PostView
from services.api.feed.candidates import fallback_slice, fallback_start, merge_top, pooled
from services.api.visibility.eligibility import PostState

ROWS = st.lists(st.tuples(st.floats(0, 2000), st.integers(1, 10**6), st.integers(1, 50)), max_size=80)


@given(st.lists(ROWS, max_size=5), st.integers(1, 60))
@example([[(0.0, 1, 2), (0.0, 1, 1)]], 1)  # one post, one key, two author ids: still one row
def test_merge_keeps_the_highest_rows_one_per_post(sources: list, depth: int) -> None:
    rows, more = merge_top(sources, depth)
    everything = [r for rows_ in sources for r in rows_]
    best: dict[int, tuple] = {}
    for r in everything:
        if r[1] not in best or r > best[r[1]]:
            best[r[1]] = r
    expected = sorted(best.values(), reverse=True)
    assert rows == expected[:depth]
    assert more == (len(expected) > depth)
    assert len({r[1] for r in rows}) == len(rows)


@given(st.lists(ROWS, max_size=5))
@example([[(5.0, 2, 7), (4.0, 1, 7)], [(5.0, 2, 7)], [(4.0, 1, 7), (9.0, 1, 7)]])
def test_pooling_is_every_distinct_row_highest_first_with_the_posts_in_doubt(sources: list) -> None:
    """Whatever order each source comes in: equal rows once, highest first; the posts with
    rows under two keys in doubt; ``doubled`` when some post has two rows."""
    rows, doubt, doubled = pooled(sources)
    distinct = sorted(set(r for rows_ in sources for r in rows_), reverse=True)
    assert rows == distinct
    keys: dict[int, set[float]] = {}
    for key, post_id, _author in distinct:
        keys.setdefault(post_id, set()).add(key)
    assert doubt == {p for p, k in keys.items() if len(k) > 1}
    assert doubled == (len(keys) < len(distinct))


def test_merge_drops_blocked_authors_and_excluded_posts() -> None:
    inbox = [(10.0, 1, 7), (9.0, 2, 8), (8.0, 3, 7)]
    celebs = [(9.5, 4, 9), (7.0, 1, 7)]  # post 1 again, lower: the higher row wins
    rows, more = merge_top([inbox, celebs], 10, frozenset({8}), lambda p: p == 3)
    assert rows == [(10.0, 1, 7), (9.5, 4, 9)] and not more


def test_fallback_slice_wraps_to_the_start_of_the_list_and_skips_celebrities() -> None:
    follows = {a: a * 10 for a in (3, 5, 9, 12, 20)}
    from_start = {a: s for a, s in follows.items() if a >= 10}
    picked = fallback_slice(from_start, follows, skip={20}, limit=3)
    assert list(picked) == [12, 3, 5]
    assert fallback_slice(from_start, follows, skip=(), limit=10) == follows  # small lists: all


def test_fallback_start_moves_every_second() -> None:
    assert fallback_start(1_000) == fallback_start(1_999) != fallback_start(2_000)
    assert 0 <= fallback_start(123_456_789) < 2**63


def view(keys: tuple, key_ts: int | None) -> PostView:
    return PostView(PostState(1, 2, 3, 1, False), keys, key_ts, None)


def test_a_row_is_live_only_under_the_copys_keys_or_if_the_copy_moved_since() -> None:
    moving = view((5.0, 6.5), key_ts=100)
    assert moving.holds_row(5.0, snapshot_us=200) and moving.holds_row(6.5, snapshot_us=200)
    assert not moving.holds_row(4.0, snapshot_us=200)   # left behind by a race: skipped
    assert moving.holds_row(4.0, snapshot_us=50)        # moved after the snapshot: stays put


def test_posts_with_rows_under_two_keys_are_in_doubt_and_the_live_row_wins() -> None:
    from services.api.feed.candidates import pooled
    inbox = [(99.0, 1, 7), (5.0, 2, 7), (4.0, 1, 7)]   # post 1: a stray row above its live one
    assert pooled([inbox, [(5.0, 2, 7)]]) == (sorted(inbox, reverse=True), {1}, True)
    assert pooled([inbox[1:], [(5.0, 2, 7)]]) == ([(5.0, 2, 7), (4.0, 1, 7)], set(), False)
    rows, _ = merge_top([inbox], 10, live=lambda row: row[1] != 1 or row[0] == 4.0)
    assert rows == [(5.0, 2, 7), (4.0, 1, 7)]


def test_latest_rows_are_keyed_by_creation_time_one_per_post() -> None:
    from services.api.feed.candidates import latest_key, latest_rows
    from services.shared.domain import ids

    old, new, newest = (ids.compose(1_790_000_000_000 + ms, 1, 0) for ms in (0, 5_000, 9_000))
    inbox = [(9.5, old, 1), (3.0, newest, 2), (7.0, new, 3), (2.0, old, 1)]  # old: two rows (a move)
    fallback = [(3.0, newest, 2)]
    rows, more = merge_top(latest_rows([inbox, fallback]), 10)
    assert [r[1] for r in rows] == [newest, new, old] and not more
    assert rows[0][0] == latest_key(newest) == float(ids.timestamp_ms(newest))
    same_ms = [ids.compose(1_790_000_000_000, node, 0) for node in (3, 1, 2)]
    tied, _ = merge_top(latest_rows([[(0.0, p, 1) for p in same_ms]]), 10)
    assert [r[1] for r in tied] == sorted(same_ms, reverse=True)  # newest first by post id


def test_rows_below_a_full_reads_last_row_wait_for_the_extension() -> None:
    from services.api.feed.candidates import read_through
    from services.shared.domain import ids

    post = [ids.compose(1_790_000_000_000 + i, 1, 0) for i in range(10)]
    inbox = [(10.0 - i, post[i], 1) for i in range(4)]          # 10, 9, 8, 7: not full
    celeb = [(9.5, post[5], 2), (8.5, post[6], 2)]              # its partition's 2 of 2: full
    rows, _ = merge_top([inbox, celeb], 100)
    kept, cut = read_through(rows, inbox, 100, [celeb], per_partition=2)
    assert cut == (8.5, post[6]) and [r[0] for r in kept] == [10.0, 9.5, 9.0, 8.5]
    assert read_through(rows, inbox, 100, [celeb], per_partition=3) == (rows, None)
    # A blocked author's full partition does not hold the others back.
    assert read_through(rows, inbox, 100, [celeb], 2, blocked=frozenset({2})) == (rows, None)


@given(st.lists(st.floats(0, 100), min_size=0, max_size=60),
       st.lists(st.floats(0, 100), min_size=0, max_size=60),
       st.integers(1, 12), st.integers(1, 6))
def test_a_walk_by_extension_visits_every_row_once_in_order(inbox_keys: list, celeb_keys: list,
                                                             depth: int, per: int) -> None:
    """The read path's walk in miniature: each step reads the top of every source strictly
    below the last row kept, merges, and keeps what ``read_through`` allows. Before the
    cut, rows of a celebrity partition read ``per`` at a time were skipped for good."""
    from services.api.feed.candidates import read_through
    from services.shared.domain import ids

    posts = iter(ids.compose(1_790_000_000_000, 1, i) for i in range(1000))  # one day bucket
    inbox = [(k, next(posts), 1) for k in inbox_keys]
    celeb = [(k, next(posts), 2) for k in celeb_keys]
    boundary: tuple[float, int] | None = None
    seen: list[tuple] = []
    for _ in range(500):
        below = [r for r in inbox if boundary is None or (r[0], r[1]) < boundary]
        top = sorted(below, reverse=True)[:depth]
        part = sorted((r for r in celeb if boundary is None or (r[0], r[1]) < boundary),
                      reverse=True)[:per]
        rows, more = merge_top([top, part], depth)
        kept, cut = read_through(rows, top, depth, [part], per)
        seen += kept
        if not kept or not (more or cut is not None):
            break
        boundary = (kept[-1][0], kept[-1][1])
    assert seen == sorted(inbox + celeb, reverse=True)
