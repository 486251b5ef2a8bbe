"""What the visibility log says about a reader's page: pure, no I/O.

Postgres appends an entry to ``visibility_changes`` in the same transaction as every
post delete or moderation change, block, unblock, unfollow, follow-again of a pair
it has logged (migration 0003), mute and unmute (migration 0005), and account suspension,
unsuspension and deletion (migration 0006: one entry per account, for every reader). ``RecentChanges`` folds the entries still in the log, in
``seq`` order, into the latest state of each post and pair. Every key it holds is
therefore the truth as of the last read of the log; a key it does not hold has no entry
left: its copies were verified against Postgres (repaired if wrong) and have settled
(migration 0004, the fan-out's verifier), so the copies decide it.

A reader's blocks (either way) and mutes are kept apart (``ReaderChanges.blocked``,
``.muted``): the home feed and the stream hide both (``hides``), an author's timeline
and lists only blocks (``hides_post``, and a block answers 404 there): a muter still
opens the muted author's timeline and sees them in lists.

It only ever hides: a page shows an entry when the copies say it is eligible AND the
recent changes do not hide it. A restore, an unblock or an unmute removes the key (the
copies decide again); a follow again keeps a lower bound (posts before its
``following_since`` stay hidden, as the copies will also say once they catch up).
"""
from __future__ import annotations

from array import array
from dataclasses import dataclass
from typing import Iterable, Mapping

POST, FOLLOW, BLOCK, MUTE, ACCOUNT = "post", "follow", "block", "mute", "account"
_KIND_CODE = {POST: 0, FOLLOW: 1, BLOCK: 2, MUTE: 3, ACCOUNT: 4}


@dataclass(frozen=True, slots=True)
class VisibilityChange:
    """One entry of ``visibility_changes`` (see the migration for the columns' meaning)."""

    seq: int
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
    blocked: frozenset[int]                  # users blocked either way with the reader
    muted: frozenset[int] = frozenset()      # users the reader mutes (feed and stream only)
    # Accounts suspended or deleted: every post of theirs is hidden from every reader.
    hidden_authors: frozenset[int] = frozenset()

    def hides(self, post_id: int, author_id: int, created_at_ms: int) -> bool:
        """Whether the log hides this post from the reader's home feed or stream,
        whatever the copies say (a mute hides there, as a block does; so does a
        suspended or deleted account)."""
        if (post_id in self.hidden_posts or author_id in self.blocked or author_id in self.muted
                or author_id in self.hidden_authors):
            return True
        if author_id in self.follows:
            since = self.follows[author_id]
            return since is None or created_at_ms < since
        return False

    def hides_post(self, post_id: int, author_id: int) -> bool:
        """Whether the log hides this post whoever follows whom (an author's own list
        of posts: deleted or removed, or its author blocked either way, suspended or
        deleted; a mute does not hide there)."""
        return (post_id in self.hidden_posts or author_id in self.blocked
                or author_id in self.hidden_authors)

    def hiding_authors(self, authors: frozenset[int]) -> ReaderChanges:
        """This view, also hiding every post of ``authors`` (the account copy's hidden
        accounts: the copies and the log both only hide)."""
        if not authors or authors <= self.hidden_authors:
            return self
        return ReaderChanges(self.hidden_posts, self.follows, self.blocked, self.muted,
                             self.hidden_authors | authors)


NOTHING: ReaderChanges = ReaderChanges({}, {}, frozenset())


class RecentChanges:
    """The log's entries not yet forgotten, folded to the latest state per post and pair.

    Besides the fold, the entries' (seq, kind, subject, object) are kept in seq order in
    flat arrays (25 bytes an entry instead of a tuple's ~100), so that ``forget_through``
    drops exactly the entries the verifier has released, and a key only when its latest
    entry is among them."""

    def __init__(self) -> None:
        self.last_seq = 0
        self._posts: dict[int, int] = {}                               # hidden post -> seq
        # reader -> (author, seq, state) while the reader has one such pair (the common
        # case, without a dict of its own), else author -> (seq, state).
        self._follows: dict[int, tuple[int, int, FollowState] | dict[int, tuple[int, FollowState]]] = {}
        self._directed: dict[tuple[int, int], int] = {}                # (blocker, blocked) -> seq
        # user -> the one user blocked either way with them, or a set of several.
        self._blocks: dict[int, int | set[int]] = {}
        # One way only: (muter, muted) -> seq, and muter -> the one user muted, or a set.
        self._muted: dict[tuple[int, int], int] = {}
        self._mutes: dict[int, int | set[int]] = {}
        # Accounts hidden from everyone (suspended or deleted): user -> seq, and the same
        # ids as one frozenset shared by every reader's view (rebuilt when it changes).
        self._accounts: dict[int, int] = {}
        self._hidden_accounts: frozenset[int] = frozenset()
        # The entries in seq order, from ``_first`` on (the ones before were forgotten).
        self._seqs = array("q")
        self._subjects = array("q")
        self._objects = array("q")
        self._kinds = bytearray()
        self._first = 0

    def __len__(self) -> int:
        return len(self._seqs) - self._first

    def apply(self, changes: Iterable[VisibilityChange]) -> None:
        """Fold entries read after ``last_seq``, in seq order (older ones are ignored)."""
        for c in changes:
            if c.seq <= self.last_seq:
                continue
            self.last_seq = c.seq
            self._seqs.append(c.seq)
            self._subjects.append(c.subject_id)
            self._objects.append(c.object_id)
            self._kinds.append(_KIND_CODE[c.kind])
            if c.kind == POST:
                if c.hidden:
                    self._posts[c.subject_id] = c.seq
                else:
                    self._posts.pop(c.subject_id, None)
            elif c.kind == FOLLOW:
                self._follow(c.subject_id, c.object_id, c.seq, None if c.hidden else (c.since_ms or 0))
            elif c.kind == BLOCK:
                if c.hidden:
                    self._block(c.subject_id, c.object_id, c.seq)
                else:
                    self._unblock(c.subject_id, c.object_id)
            elif c.kind == MUTE:
                if c.hidden:
                    self._muted[(c.subject_id, c.object_id)] = c.seq
                    _add_other(self._mutes, c.subject_id, c.object_id)
                else:
                    self._unmute(c.subject_id, c.object_id)
            elif c.kind == ACCOUNT:
                if c.hidden:
                    self._accounts[c.subject_id] = c.seq
                else:
                    self._accounts.pop(c.subject_id, None)
                self._hidden_accounts = frozenset(self._accounts)

    def _follow(self, reader: int, author: int, seq: int, state: FollowState) -> None:
        held = self._follows.get(reader)
        if held is None or (isinstance(held, tuple) and held[0] == author):
            self._follows[reader] = (author, seq, state)
        elif isinstance(held, tuple):
            self._follows[reader] = {held[0]: (held[1], held[2]), author: (seq, state)}
        else:
            held[author] = (seq, state)

    def _forget_follow(self, reader: int, author: int, seq: int) -> None:
        """Drops the pair if ``seq`` is still its latest entry."""
        held = self._follows.get(reader)
        if isinstance(held, tuple):
            if held[0] == author and held[1] == seq:
                del self._follows[reader]
        elif held is not None:
            pair = held.get(author)
            if pair is not None and pair[0] == seq:
                del held[author]
                if len(held) == 1:
                    (other, (other_seq, other_state)), = held.items()
                    self._follows[reader] = (other, other_seq, other_state)

    def _block(self, blocker: int, blocked: int, seq: int) -> None:
        self._directed[(blocker, blocked)] = seq
        self._add_blocked(blocker, blocked)
        self._add_blocked(blocked, blocker)

    def _add_blocked(self, user: int, other: int) -> None:
        _add_other(self._blocks, user, other)

    def _unblock(self, blocker: int, blocked: int) -> None:
        """Lifts ``blocker -> blocked``; the pair stays hidden while the other way stands."""
        self._directed.pop((blocker, blocked), None)
        if (blocked, blocker) in self._directed:
            return
        for user, other in ((blocker, blocked), (blocked, blocker)):
            _drop_other(self._blocks, user, other)

    def _unmute(self, muter: int, muted: int) -> None:
        """Lifts ``muter``'s mute of ``muted`` (a block between them hides on its own)."""
        self._muted.pop((muter, muted), None)
        _drop_other(self._mutes, muter, muted)

    def for_reader(self, reader_id: int) -> ReaderChanges:
        """The view one page consults: built once per page, cheap when the log is quiet."""
        if len(self._seqs) == self._first:
            return NOTHING
        follows = self._follows.get(reader_id)
        return ReaderChanges(
            self._posts,
            {} if follows is None else {follows[0]: follows[2]} if isinstance(follows, tuple)
            else {a: s for a, (_seq, s) in follows.items()},
            _others(self._blocks.get(reader_id)),
            _others(self._mutes.get(reader_id)), self._hidden_accounts)

    def forget_through(self, upto: int) -> int:
        """Drop the entries with seq <= ``upto`` (verified and settled: they left the
        log), unless a later entry of the same post or pair replaced them. Returns how
        many were dropped."""
        seqs, first, end = self._seqs, self._first, len(self._seqs)
        i = first
        while i < end and seqs[i] <= upto:
            seq, subject, obj, kind = seqs[i], self._subjects[i], self._objects[i], self._kinds[i]
            i += 1
            if kind == 0:
                if self._posts.get(subject) == seq:
                    del self._posts[subject]
            elif kind == 1:
                self._forget_follow(subject, obj, seq)
            elif kind == 2:
                if self._directed.get((subject, obj)) == seq:
                    self._unblock(subject, obj)
            elif kind == 3:
                if self._muted.get((subject, obj)) == seq:
                    self._unmute(subject, obj)
            elif self._accounts.get(subject) == seq:
                del self._accounts[subject]
                self._hidden_accounts = frozenset(self._accounts)
        dropped = i - first
        self._first = i
        if self._first > 4096 and self._first * 2 > end:  # compact: the front is mostly gone
            for a in (self._seqs, self._subjects, self._objects):
                del a[:self._first]
            del self._kinds[:self._first]
            self._first = 0
        return dropped


def _add_other(held_by: dict[int, int | set[int]], user: int, other: int) -> None:
    """Adds ``other`` to ``user``'s one id or set of ids."""
    held = held_by.get(user)
    if held is None:
        held_by[user] = other
    elif isinstance(held, int):
        if held != other:
            held_by[user] = {held, other}
    else:
        held.add(other)


def _drop_other(held_by: dict[int, int | set[int]], user: int, other: int) -> None:
    """Removes ``other`` from ``user``'s ids (back to one id, or none, as they shrink)."""
    held = held_by.get(user)
    if isinstance(held, int):
        if held == other:
            del held_by[user]
    elif held is not None:
        held.discard(other)
        if len(held) == 1:
            held_by[user] = next(iter(held))


def _others(held: int | set[int] | None) -> frozenset[int]:
    return frozenset() if held is None else frozenset((held,)) if isinstance(held, int) else frozenset(held)
