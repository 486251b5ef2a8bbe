"""The feed's ranking formula (docs/ranking.md). Pure: no I/O, the clock is an argument.

Three parts:

* ``engagement_score(likes, features)``: written by the ranker into ``posts.score`` when
  a like or a feature event arrives. It does not depend on time, so it can be stored.
* ``rank_key(score, created_at_ms)``: the *time-invariant* rank key that inbox and
  author-partition rows are clustered by (the specified schema: ``feed_inbox`` keyed
  ``(reader_id, rank_key, post_id)``). Decay is the same for every post, so
  ``score - age / HALF_LIFE`` = ``score + created_at / HALF_LIFE - now / HALF_LIFE``:
  the first two terms order posts the same way at any ``now``, and no row needs
  rescoring as time passes. ``rank_of_key(key, now_ms)`` gives the rank back.
* ``rank_at(score, created_at_ms, now_ms, affinity)``: the same rank computed directly,
  with a per-reader signal. The read path does not use affinity (docs/ranking.md: no
  per-reader signal is collected; a re-rank of the page window would be the place).

Everything is in log2 units, so ``2 ** rank`` is a weight that halves every
``HALF_LIFE_S`` of age, doubles with each doubling of ``1 + likes``, and multiplies by
``2 ** (AFFINITY_WEIGHT * affinity)`` for an author the reader engages with.
Ties are broken by post_id (newer id first), so an order is total and deterministic,
which cursor paging (``(rank, post_id)`` boundaries) relies on.
"""
from __future__ import annotations

import math
from typing import Mapping, NamedTuple

from .ids import EPOCH_MS

# Six hours: a feed read ~1,000 times per post written (docs/architecture.md) should still
# show yesterday's very popular post below today's ordinary one: at 24 h a post has lost
# 4 units (16x), which one ~16x more likes (4 units) exactly offsets.
HALF_LIFE_S = 6 * 3600.0
# One unit per doubling of (1 + likes): diminishing returns, so a viral post does not
# pin the top of every feed for days.
LIKE_WEIGHT = 1.0
# Feature weights for the names the ranking services publish on <prefix>.rank-features.
# Unknown names are stored but weigh 0 until a weight is agreed here (and documented).
FEATURE_WEIGHTS: Mapping[str, float] = {
    "quality": 2.0,        # model quality score in [0, 1]: up to 2 units (= 4x)
    "author_quality": 1.0,  # author-level reputation in [0, 1]
    "spam": -8.0,          # spam probability in [0, 1]: a sure spam post sinks 2 days
}
# Feature values are clamped so one bad producer cannot dominate every feed.
FEATURE_CLAMP = (-10.0, 10.0)
# Per-reader affinity in [0, 1] (the read path's share of the reader's recent likes that
# went to this author): up to one unit, the same as doubling the likes.
AFFINITY_WEIGHT = 1.0


# Rows move (delete + insert under a new clustering key) only when a post's exact key is
# this far from the stored one: half a unit = 3 hours of recency = a 41 % change in
# (1 + likes). A post liked 1,000 times moves ~20 times, not 1,000; the order of a page is
# exact to within this, and the read path ranks a post by its stored key.
MOVE_THRESHOLD = 0.5


def engagement_score(likes: int, features: Mapping[str, float] | None = None) -> float:
    """Stored per-post score: ``LIKE_WEIGHT*log2(1+likes) + sum(weight*clamped feature)``."""
    score = LIKE_WEIGHT * math.log2(1 + max(0, likes))
    for name, value in (features or {}).items():
        weight = FEATURE_WEIGHTS.get(name, 0.0)
        if weight and math.isfinite(value):
            score += weight * min(max(value, FEATURE_CLAMP[0]), FEATURE_CLAMP[1])
    return score


def recency_decay(created_at_ms: int, now_ms: int) -> float:
    """Units lost to age: one per half-life. A post from the future (clock skew) loses 0."""
    age_s = max(0, now_ms - created_at_ms) / 1000.0
    return age_s / HALF_LIFE_S


def rank_at(score: float | None, created_at_ms: int, now_ms: int, affinity: float = 0.0) -> float:
    """The rank the read path sorts by: stored score + reader affinity - recency decay."""
    clamped_affinity = min(max(affinity, 0.0), 1.0)
    return (score or 0.0) + AFFINITY_WEIGHT * clamped_affinity - recency_decay(created_at_ms, now_ms)


def rank_key(score: float | None, created_at_ms: int) -> float:
    """Time-invariant clustering key: ``score + (created_at - EPOCH) / HALF_LIFE`` (units).

    Measured from the id epoch (2026-01-01) so keys stay small (~1,500 a year) and exact
    in a double. Higher key = higher in every feed, at any time.
    """
    return (score or 0.0) + (created_at_ms - EPOCH_MS) / 1000.0 / HALF_LIFE_S


def rank_of_key(key: float, now_ms: int) -> float:
    """The rank at ``now_ms`` of a post stored under ``key`` (``rank_at`` without affinity)."""
    return key - (now_ms - EPOCH_MS) / 1000.0 / HALF_LIFE_S


def needs_move(stored_key: float | None, exact_key: float) -> bool:
    """Whether rows stored under ``stored_key`` must move to ``exact_key`` (coalescing)."""
    return stored_key is None or abs(exact_key - stored_key) >= MOVE_THRESHOLD


class Ranked(NamedTuple):
    """A post's place in a ranking. A tuple: a page decodes ~30 of these per request
    (snapshot.PackedEntries), and a tuple is built in C where a frozen dataclass's
    ``__init__`` ran three ``object.__setattr__`` calls (~3 % of a first page's CPU)."""

    rank: float
    post_id: int
    author_id: int | None


def sort_key(rank: float, post_id: int) -> tuple[float, int]:
    """Descending order key: higher rank first, then higher (newer) post_id."""
    return (-rank, -post_id)
