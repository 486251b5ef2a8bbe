"""A post as one request reads it (``PostView``: state, rank keys, body) and the immutable
part of its copy (``PostBody``). Made by ``bodies.PostCopies``, kept by the serving cache
(serving_cache.py), used by the read path; here so that neither of the first two imports
the other for it.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..visibility.eligibility import PostState


@dataclass(frozen=True, slots=True)
class PostBody:
    """The immutable part of a post copy."""

    author_id: int
    created_at_ms: int
    text: str
    media_ids: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class PostView:
    """A post as read for this request: current state, rank keys, and its body."""

    state: PostState
    keys: tuple[float | None, float | None]  # rank_key, rank_key_next
    key_ts: int | None                       # WRITETIME(rank_key), µs
    body: PostBody | None

    def holds_row(self, rank_key: float, snapshot_us: int) -> bool:
        """Whether a row or snapshot entry under ``rank_key`` is this post's live row.

        A row is the post's while its key is the copy's key or the key a move is taking
        it to. A snapshot built before the copy's key last moved (``key_ts`` after
        ``snapshot_us``) keeps the entry where it was ranked: pages of one snapshot do
        not reorder. Anything else is a row left behind by a race (docs/read-path.md).
        """
        if rank_key in self.keys:
            return True
        return self.key_ts is not None and self.key_ts > snapshot_us
