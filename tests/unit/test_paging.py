"""Paging a snapshot: strictly after the boundary, skipping ineligible, filling the page."""
from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from services.api.snapshots import paging, snapshot
from services.shared.domain.ranking import Ranked, sort_key

ENTRIES = [Ranked(5.0, 50, 1), Ranked(3.0, 40, 1), Ranked(3.0, 30, 2), Ranked(1.0, 60, 2),
           Ranked(-2.0, 10, 1)]


def test_first_page_starts_at_the_top() -> None:
    assert paging.start_after(ENTRIES, None) == 0


def test_boundary_is_exclusive_and_ties_break_on_post_id() -> None:
    assert paging.start_after(ENTRIES, (3.0, 40)) == 2
    assert paging.start_after(ENTRIES, (3.0, 30)) == 3


def test_boundary_of_an_entry_not_in_the_snapshot_lands_between_neighbours() -> None:
    assert paging.start_after(ENTRIES, (3.0, 35)) == 2
    assert paging.start_after(ENTRIES, (9.0, 1)) == 0
    assert paging.start_after(ENTRIES, (-9.0, 1)) == len(ENTRIES)


def test_fill_skips_ineligible_and_still_fills() -> None:
    got = paging.fill(ENTRIES, 2, lambda e: e.post_id != 40)
    assert [e.post_id for e in got.items] == [50, 30]
    assert got.consumed == 3


def test_fill_stops_when_entries_run_out() -> None:
    got = paging.fill(ENTRIES, 10, lambda e: e.author_id == 2)
    assert [e.post_id for e in got.items] == [30, 60]
    assert got.consumed == len(ENTRIES)


def test_page_ends_before_an_entry_it_could_not_check() -> None:
    assert [e.post_id for e in paging.until_unknown(ENTRIES, {30})] == [50, 40]


def test_window_asks_for_slack() -> None:
    assert len(paging.window(ENTRIES, 1, 2, 0.5)) == 4
    assert paging.window(ENTRIES, 5, 2, 0.5) == []


def test_snapshot_blob_round_trips() -> None:
    blob = snapshot.pack_tuples(ENTRIES)
    assert list(snapshot.PackedEntries(blob)) == ENTRIES


ranked_lists = st.lists(
    st.tuples(st.sampled_from([-1.5, 0.0, 0.25, 2.0]), st.integers(1, 10_000)),
    unique_by=lambda t: t[1], max_size=60,
).map(lambda rows: sorted((Ranked(r, p, 1) for r, p in rows), key=lambda e: sort_key(e.rank, e.post_id)))


@settings(max_examples=200, deadline=None)
@given(ranked_lists, st.integers(1, 7), st.randoms(use_true_random=False))
def test_walking_pages_never_repeats_or_skips(entries: list[Ranked], limit: int,
                                              rnd: random.Random) -> None:
    """Whatever becomes ineligible between pages, every always-eligible entry is seen once."""
    hidden: set[int] = set()
    seen: list[int] = []
    boundary: tuple[float, int] | None = None
    while True:
        hidden |= {e.post_id for e in entries if rnd.random() < 0.1}
        start = paging.start_after(entries, boundary)
        got = paging.fill(entries[start:], limit, lambda e: e.post_id not in hidden)
        seen += [e.post_id for e in got.items]
        assert all(e.post_id not in hidden for e in got.items)
        if len(got.items) < limit or not paging.has_more(entries, start + got.consumed):
            break
        boundary = (got.items[-1].rank, got.items[-1].post_id)
    assert len(seen) == len(set(seen))
    never_hidden = [e.post_id for e in entries if e.post_id not in hidden]
    assert set(never_hidden) <= set(seen)
    assert seen == [e.post_id for e in entries if e.post_id in set(seen)]  # feed order kept
