"""Pages of a ranking snapshot. Pure: no I/O, no clock.

A snapshot is a list of ``Ranked`` entries in the feed's total order (rank descending,
then post_id descending: ``ranking.sort_key``). A page starts strictly after the
cursor's ``(rank, post_id)``, skips entries that are no longer eligible and is filled
while entries remain, so one deleted post never shortens a page. The boundary is a
value, not an offset: new posts are never inserted into a snapshot, and an entry
removed from under a cursor cannot shift the next page.
"""
from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from typing import Callable, Sequence

from services.shared.domain.ranking import Ranked, sort_key


def start_after(entries: Sequence[Ranked], boundary: tuple[float, int] | None) -> int:
    """Index of the first entry strictly after ``boundary`` (0 for a first page)."""
    if boundary is None:
        return 0
    return bisect_right(entries, sort_key(*boundary), key=lambda e: sort_key(e.rank, e.post_id))


def window(entries: Sequence[Ranked], start: int, wanted: int, slack: float) -> list[Ranked]:
    """The next entries to check for ``wanted`` more items: ``wanted`` plus a share of slack.

    Slack is what the caller expects to lose to ineligible entries, so one batch of post
    reads usually fills the page; a page that still falls short asks for another window.
    """
    size = max(1, wanted + int(wanted * slack) + 1)
    return list(entries[start:start + size])


def until_unknown(candidates: Sequence[Ranked], unknown: set[int] | frozenset[int]) -> list[Ranked]:
    """The entries before the first one whose state is unknown (its read failed).

    A page never jumps over an entry it could not check: it ends before it, and the
    cursor resumes there, so an entry is neither skipped nor shown unchecked.
    """
    out: list[Ranked] = []
    for entry in candidates:
        if entry.post_id in unknown:
            break
        out.append(entry)
    return out


@dataclass(frozen=True)
class PageFill:
    items: list[Ranked]
    consumed: int  # entries of the window examined (eligible or not)


def fill(candidates: Sequence[Ranked], wanted: int,
         eligible: Callable[[Ranked], bool]) -> PageFill:
    """Take eligible entries in order until ``wanted``; report how far the scan went."""
    items: list[Ranked] = []
    consumed = 0
    for entry in candidates:
        if len(items) >= wanted:
            break
        consumed += 1
        if eligible(entry):
            items.append(entry)
    return PageFill(items, consumed)


def has_more(entries: Sequence[Ranked], next_index: int) -> bool:
    """Whether entries remain after the page (a null ``next_cursor`` ends the walk)."""
    return next_index < len(entries)
