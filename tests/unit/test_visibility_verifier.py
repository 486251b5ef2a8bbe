"""The visibility verifier's decisions without a store: which entries verify, which are
repairs, where a walk stops, how the settle marks move with time, what a comparison of a
copy with Postgres finds, and how the repair command counts (services/fanout/verifier.py,
copy_audit.py, jobs/repair.py)."""
from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone

from services.fanout.audience import PostCopy
from services.fanout.copy_audit import (BLOCK, BLOCK_IN, BLOCK_OUT, FOLLOW, FOLLOW_COUNT, FOLLOWERS,
                                        FOLLOWING, POST, TIMELINE, BlockCopies, Copies, Difference,
                                        FollowCopies, Key, PostRow, RepairOutcome, Truth,
                                        block_differences, differences, follow_differences,
                                        post_differences, timeline_differences)
from services.fanout.jobs.repair import Report
from services.fanout.verifier import Entry, SettleMarks, plan_walk, still_wrong
from services.shared.domain.rules import REMOVED, VISIBLE

AT = datetime(2026, 6, 1, 12, 0, 0, 123456, tzinfo=timezone.utc)


def entry(seq: int, kind: str = FOLLOW, subject: int = 1, obj: int = 2, age_s: float = 1000.0,
          hidden: bool = True) -> Entry:
    return Entry(seq, kind, subject, obj, hidden, age_s)


# -- the walk ----------------------------------------------------------------------------
def test_entries_whose_copies_are_right_all_verify_and_nothing_is_repaired():
    entries = [entry(1), entry(2, BLOCK, 3, 4), entry(3, POST, 9, 1)]
    walk = plan_walk(entries, set(), repair_after_s=120)
    assert [e.seq for e in walk.verified] == [1, 2, 3]
    assert walk.repairs == () and walk.held_by is None


def test_a_wrong_entry_past_repair_after_is_a_repair_and_then_verified():
    entries = [entry(1, subject=5), entry(2, subject=6, age_s=121), entry(3, subject=7)]
    walk = plan_walk(entries, {Key(FOLLOW, 6, 2)}, repair_after_s=120)
    assert [e.seq for e in walk.verified] == [1, 2, 3]
    assert [e.seq for e in walk.repairs] == [2]


def test_a_wrong_entry_younger_than_repair_after_stops_the_walk_before_it():
    entries = [entry(1, subject=5), entry(2, subject=6, age_s=30), entry(3, subject=7)]
    walk = plan_walk(entries, {Key(FOLLOW, 6, 2)}, repair_after_s=120)
    assert [e.seq for e in walk.verified] == [1]
    assert walk.held_by == entries[1] and walk.repairs == ()


def test_a_young_wrong_entry_stops_the_walk_even_when_right_ones_follow_it():
    entries = [entry(1, subject=6, age_s=10), entry(2, subject=7, age_s=5)]
    walk = plan_walk(entries, {Key(FOLLOW, 6, 2)}, repair_after_s=120)
    assert walk.verified == () and walk.held_by == entries[0]


def test_later_entries_of_a_key_being_repaired_are_covered_by_its_repair():
    # The repair writes Postgres's truth now: it covers the younger entry of the same pair.
    entries = [entry(1, subject=6, age_s=300), entry(2, subject=6, age_s=1, hidden=False)]
    walk = plan_walk(entries, {Key(FOLLOW, 6, 2)}, repair_after_s=120)
    assert [e.seq for e in walk.verified] == [1, 2]
    assert [e.seq for e in walk.repairs] == [1]


def test_an_infinite_repair_after_holds_at_every_wrong_key():
    entries = [entry(1, subject=5), entry(2, subject=6, age_s=10 ** 9)]
    walk = plan_walk(entries, {Key(FOLLOW, 6, 2)}, math.inf)
    assert [e.seq for e in walk.verified] == [1] and walk.held_by == entries[1]


def test_what_still_holds_the_walk_after_repairs():
    a, b, c = Key(FOLLOW, 1, 2), Key(BLOCK, 3, 4), Key(POST, 5, 6)
    wrong = {a, b, c}
    assert still_wrong(wrong, {a, b}, None) == wrong  # no repair could be made
    outcome = RepairOutcome(repaired={a: ()}, stuck={b: ()}, lsn=10)
    assert still_wrong(wrong, {a, b}, outcome) == {b, c}  # c was young, b did not take
    assert still_wrong(wrong, {a, b}, RepairOutcome({}, {}, 10)) == {c}  # right on a second look


# -- the marks ---------------------------------------------------------------------------
def test_upto_moves_only_to_marks_that_have_stood_the_settle_time():
    marks = SettleMarks()
    marks.reset(upto=0, checked=0, now=0.0)
    marks.verified(10, now=100.0)
    marks.verified(20, now=200.0)
    marks.verified(15, now=250.0)   # not past the last mark: ignored
    assert marks.settled(now=450.0, settle_s=360) is None
    assert marks.settled(now=460.0, settle_s=360) == 10
    assert marks.settled(now=559.0, settle_s=360) is None
    assert marks.settled(now=560.0, settle_s=360) == 20
    assert len(marks) == 0


def test_several_settled_marks_give_the_highest():
    marks = SettleMarks()
    for seq, at in ((5, 1.0), (8, 2.0), (13, 3.0)):
        marks.verified(seq, at)
    assert marks.settled(now=1000.0, settle_s=360) == 13


def test_after_a_restart_what_lies_between_the_marks_waits_a_whole_settle_time():
    marks = SettleMarks()
    marks.reset(upto=40, checked=70, now=1000.0)
    assert marks.settled(now=1359.0, settle_s=360) is None
    assert marks.settled(now=1360.0, settle_s=360) == 70
    marks.reset(upto=70, checked=70, now=2000.0)   # nothing between them: nothing waits
    assert len(marks) == 0


# -- comparisons -------------------------------------------------------------------------
def row(*, deleted: bool = False, visibility: int = VISIBLE) -> PostRow:
    return PostRow(9, 1, AT, "hi", [], visibility, deleted)


def copy(*, deleted: bool | None = False, visibility: int | None = VISIBLE,
         author: int | None = 1) -> PostCopy:
    return PostCopy(9, author, AT, visibility, deleted, 100, True)


def test_a_post_differs_only_when_its_hidden_ness_does():
    assert post_differences(row(), copy()) == ()
    assert post_differences(row(deleted=True), copy(deleted=True)) == ()
    # Deleted in Postgres, removed in the copy: hidden both ways, nothing to repair.
    assert post_differences(row(deleted=True), copy(visibility=REMOVED)) == ()
    assert post_differences(row(deleted=True), copy()) == (Difference(POST, "deleted", "visible"),)
    assert post_differences(row(visibility=REMOVED), copy()) == (Difference(POST, "removed", "visible"),)
    assert post_differences(row(), copy(deleted=True)) == (Difference(POST, "visible", "deleted"),)


def test_a_missing_copy_is_right_for_a_hidden_post_and_wrong_for_a_visible_one():
    assert post_differences(row(deleted=True), None) == ()
    assert post_differences(None, None) == ()
    assert post_differences(row(), None) == (Difference(POST, "visible", "no copy"),)
    assert post_differences(None, copy()) == (Difference(POST, "no row", "visible"),)
    # A copy with only the ranker's cells (no author yet) is hidden on the read path.
    assert post_differences(row(), copy(author=None)) == (Difference(POST, "visible", "incomplete copy"),)


def test_a_follow_compares_both_copies_to_the_millisecond_and_the_counted_state():
    since = AT
    in_cassandra = AT.replace(microsecond=123000)   # what Cassandra keeps of it
    assert follow_differences(since, FollowCopies(in_cassandra, in_cassandra.replace(tzinfo=None), True)) == ()
    assert follow_differences(None, FollowCopies(None, None, None)) == ()
    assert follow_differences(None, FollowCopies(None, None, False)) == ()
    unfollow_lost = follow_differences(None, FollowCopies(in_cassandra, in_cassandra, True))
    assert [d.part for d in unfollow_lost] == [FOLLOWING, FOLLOWERS, FOLLOW_COUNT]
    later = since + timedelta(seconds=5)
    moved = follow_differences(later, FollowCopies(in_cassandra, _ms_floor(later), True))
    assert [d.part for d in moved] == [FOLLOWING]
    never_counted = follow_differences(since, FollowCopies(in_cassandra, in_cassandra, None))
    assert never_counted == (Difference(FOLLOW_COUNT, "following", "never counted"),)


def _ms_floor(ts: datetime) -> datetime:
    return ts.replace(microsecond=ts.microsecond // 1000 * 1000)


def test_a_block_needs_both_rows_and_an_unblock_neither():
    assert block_differences(True, BlockCopies(True, True)) == ()
    assert block_differences(False, BlockCopies(False, False)) == ()
    assert [d.part for d in block_differences(True, BlockCopies(True, False))] == [BLOCK_IN]
    assert [d.part for d in block_differences(False, BlockCopies(True, True))] == [BLOCK_OUT, BLOCK_IN]


def test_only_a_visible_post_needs_its_timeline_row():
    assert timeline_differences(row(), in_timeline=True) == ()
    assert timeline_differences(row(deleted=True), in_timeline=False) == ()
    assert timeline_differences(None, in_timeline=False) == ()
    assert [d.part for d in timeline_differences(row(), in_timeline=False)] == [TIMELINE]


def test_differences_picks_each_keys_truth_and_copies():
    truth = Truth(posts={9: row()}, follows={(1, 2): AT}, blocks=frozenset({(3, 4)}))
    copies = Copies(posts={9: copy(deleted=True)},
                    follows={(1, 2): FollowCopies(None, None, None)},
                    blocks={(3, 4): BlockCopies(True, True)}, timelines={1: frozenset({9})})
    assert [d.part for d in differences(Key(POST, 9, 1), truth, copies)] == [POST]
    assert [d.part for d in differences(Key(FOLLOW, 1, 2), truth, copies)] == [FOLLOWING, FOLLOWERS,
                                                                               FOLLOW_COUNT]
    assert differences(Key(BLOCK, 3, 4), truth, copies) == ()
    assert differences(Key(TIMELINE, 9, 1), truth, copies) == ()


# -- the repair command's counts ---------------------------------------------------------
def test_the_report_counts_keys_per_kind_and_a_blocks_two_rows_once():
    report = Report(dry_run=False)
    follow, block = Key(FOLLOW, 1, 2), Key(BLOCK, 3, 4)
    unfollowed = (Difference(FOLLOWING, "no row", "since x"), Difference(FOLLOW_COUNT, "not following", "following"))
    blocked = (Difference(BLOCK_OUT, "blocked", "no row"), Difference(BLOCK_IN, "blocked", "no row"))
    report.count([follow, Key(FOLLOW, 1, 5), block], {follow: unfollowed, block: blocked},
                 {follow: unfollowed[:1]})
    k = report.kinds
    assert (k[FOLLOWING].checked, k[FOLLOWING].differing, k[FOLLOWING].repaired) == (2, 1, 1)
    assert (k[FOLLOWERS].checked, k[FOLLOWERS].differing) == (2, 0)
    assert (k[FOLLOW_COUNT].differing, k[FOLLOW_COUNT].repaired) == (1, 0)
    assert (k[BLOCK].checked, k[BLOCK].differing, k[BLOCK].repaired) == (1, 1, 0)
    assert len(report.differences) == 4 and report.differed
    assert not Report(dry_run=True).differed
