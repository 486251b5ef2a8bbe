"""What the visibility log says about a reader's page: pure, no I/O.

Postgres appends an entry to ``visibility_changes`` in the same transaction as every
post delete or moderation change, block, unblock, unfollow, and follow-again of a pair
it has logged (migration 0003). ``RecentChanges`` folds the retained entries, in
``seq`` order, into the latest state of each post and pair. Every key it holds is
therefore the truth as of the last read of the log; a key it does not hold had no
change within the retention, and the copies (which lag the pipeline) decide it.

It only ever hides: a page shows an entry when the copies say it is eligible AND the
recent changes do not hide it. A restore or an unblock removes the key (the copies
decide again); a follow again keeps a lower bound (posts before its
``following_since`` stay hidden, as the copies will also say once they catch up).
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Iterable, Mapping

POST, FOLLOW, BLOCK = "post", "follow", "block"


@dataclass(frozen=True, slots=True)
class VisibilityChange:
    """One entry of ``visibility_changes`` (see the migration for the columns' meaning)."""

    seq: int
    changed_at_ms: int
    kind: str
    subject_id: int
    object_id: int
    hidden: bool
    since_ms: int | None = None


# A pair's follow state: None = not following (every post hidden), else following since
# this Unix ms (older posts hidden).
FollowState = int | None


@dataclass(frozen=True, slots=True)
class ReaderChanges:
    """The recent changes that concern one reader: what a page of theirs consults."""

    hidden_posts: Mapping[int, int]          # post_id -> seq (deleted or removed)
    follows: Mapping[int, FollowState]       # author_id -> follow state
    blocked: frozenset[int]                  # authors blocked either way

    def hides(self, post_id: int, author_id: int, created_at_ms: int) -> bool:
        """Whether the log hides this post from the reader, whatever the copies say."""
        if post_id in self.hidden_posts or author_id in self.blocked:
            return True
        if author_id in self.follows:
            since = self.follows[author_id]
            return since is None or created_at_ms < since
        return False


NOTHING: ReaderChanges = ReaderChanges({}, {}, frozenset())


class RecentChanges:
    """The retained log, folded to the latest state per post and pair."""

    def __init__(self) -> None:
        self.last_seq = 0
        self._posts: dict[int, int] = {}                               # hidden post -> seq
        self._follows: dict[int, dict[int, tuple[int, FollowState]]] = {}  # reader -> author -> (seq, state)
        self._directed: dict[tuple[int, int], int] = {}                # (blocker, blocked) -> seq
        self._blocks: dict[int, set[int]] = {}                         # user -> blocked either way
        # (changed_at_ms, seq, kind, subject, object) in seq order, for ``forget_before``.
        self._ages: deque[tuple[int, int, str, int, int]] = deque()

    def __len__(self) -> int:
        return len(self._ages)

    def apply(self, changes: Iterable[VisibilityChange]) -> None:
        """Fold entries read after ``last_seq``, in seq order (older ones are ignored)."""
        for c in changes:
            if c.seq <= self.last_seq:
                continue
            self.last_seq = c.seq
            self._ages.append((c.changed_at_ms, c.seq, c.kind, c.subject_id, c.object_id))
            if c.kind == POST:
                if c.hidden:
                    self._posts[c.subject_id] = c.seq
                else:
                    self._posts.pop(c.subject_id, None)
            elif c.kind == FOLLOW:
                state = None if c.hidden else (c.since_ms or 0)
                self._follows.setdefault(c.subject_id, {})[c.object_id] = (c.seq, state)
            elif c.kind == BLOCK:
                if c.hidden:
                    self._block(c.subject_id, c.object_id, c.seq)
                else:
                    self._unblock(c.subject_id, c.object_id)

    def _block(self, blocker: int, blocked: int, seq: int) -> None:
        self._directed[(blocker, blocked)] = seq
        self._blocks.setdefault(blocker, set()).add(blocked)
        self._blocks.setdefault(blocked, set()).add(blocker)

    def _unblock(self, blocker: int, blocked: int) -> None:
        """Lifts ``blocker -> blocked``; the pair stays hidden while the other way stands."""
        self._directed.pop((blocker, blocked), None)
        if (blocked, blocker) in self._directed:
            return
        for user, other in ((blocker, blocked), (blocked, blocker)):
            others = self._blocks.get(user)
            if others is not None:
                others.discard(other)
                if not others:
                    del self._blocks[user]

    def for_reader(self, reader_id: int) -> ReaderChanges:
        """The view one page consults: built once per page, cheap when the log is quiet."""
        if not self._ages:
            return NOTHING
        follows = self._follows.get(reader_id)
        blocked = self._blocks.get(reader_id)
        return ReaderChanges(self._posts,
                             {a: s for a, (_seq, s) in follows.items()} if follows else {},
                             frozenset(blocked) if blocked else frozenset())

    def forget_before(self, cutoff_ms: int) -> int:
        """Drop entries changed before ``cutoff_ms`` (the log's trim), unless a later
        entry of the same post or pair replaced them. Returns how many were dropped."""
        dropped = 0
        while self._ages and self._ages[0][0] < cutoff_ms:
            _at, seq, kind, subject, obj = self._ages.popleft()
            dropped += 1
            if kind == POST:
                if self._posts.get(subject) == seq:
                    del self._posts[subject]
            elif kind == FOLLOW:
                pairs = self._follows.get(subject)
                held = pairs.get(obj) if pairs is not None else None
                if pairs is not None and held is not None and held[0] == seq:
                    del pairs[obj]
                    if not pairs:
                        del self._follows[subject]
            elif kind == BLOCK and self._directed.get((subject, obj)) == seq:
                self._unblock(subject, obj)
        return dropped
