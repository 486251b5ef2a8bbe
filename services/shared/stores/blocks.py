"""Owner of the block and mute copies: ``blocks``.

Table (0001_serving.cql): ``blocks (user_id, other_id, direction)``, both directions of
a block in the two users' partitions: ``(blocker, blocked, 'out')`` and ``(blocked,
blocker, 'in')`` (``both_ways``), and a mute as one row in the muter's partition only:
``(muter, muted, 'mute')`` (``mute_row``), all written by the fan-out ``USING TIMESTAMP
<lsn>``. The read path reads a reader's mutes with its blocks, at no extra read, with
their direction: the home feed and the stream hide every ``other_id`` of the partition
(blocked either way, or muted), an author's timeline and lists only the blocked ones
(``is_block``: a mute hides nothing there). The
fan-out's audience (who gets an author's posts) is blocks only: a user's mutes do not
keep their own posts from the users they mute, so its reads carry the direction and
``audience_other`` drops mute rows.

- ``ReadPathBlocks``: the API's read path, a reader's partition in slices of ``page``
  rows (each slice after the last id of the one before) and one pair's rows.
- ``FanoutBlocks``: the fan-out's writes, its reads of an author's partition (alone, or
  with other posts' authors as one ``IN`` read), and the copy audit's reads.

Deliberate: a partition's ids are read from the driver's rows as they come (a set of
``other_id``), no row object made per block.
"""
from __future__ import annotations

from typing import NamedTuple

from .statements import Cql, Statements

OUT, IN, MUTE = "out", "in", "mute"
BLOCK_DIRECTIONS = (OUT, IN)


class OtherRow(NamedTuple):
    """``blocks`` reads: one user hidden from the partition's user, and how: blocked either
    way (``OUT``, ``IN``) or muted by them (``MUTE``). A pair may have several rows."""

    other_id: int
    direction: str


class DirectionRow(NamedTuple):
    """``between``: one direction of a pair's block (``OUT`` or ``IN``)."""

    direction: str


class BlockRow(NamedTuple):
    """``with_directions``: a row of a user's partition."""

    other_id: int
    direction: str

    def pair(self, user_id: int) -> tuple[int, int]:
        """(blocker, blocked) of this row of ``user_id``'s partition; (muter, muted) of a
        ``MUTE`` row."""
        return (user_id, self.other_id) if self.direction in (OUT, MUTE) else (self.other_id, user_id)


class UserBlockRow(NamedTuple):
    """``others_in``: a row with its partition's user first (the coalesced read's key)."""

    user_id: int
    other_id: int
    direction: str


def audience_other(direction: str) -> bool:
    """Whether a row of an author's partition keeps its ``other_id`` from the author's
    posts: a block either way does, the author's mute of them does not."""
    return is_block(direction)


def is_block(direction: str) -> bool:
    """Whether a row is one way of a block (else the partition's user's mute)."""
    return direction != MUTE


def both_ways(blocker_id: int, blocked_id: int) -> tuple[tuple[int, int, str], tuple[int, int, str]]:
    """The two rows one block is: ``(user_id, other_id, direction)`` of each partition."""
    return (blocker_id, blocked_id, OUT), (blocked_id, blocker_id, IN)


def mute_row(muter_id: int, muted_id: int) -> tuple[int, int, str]:
    """The one row a mute is: ``(user_id, other_id, direction)`` of the muter's partition."""
    return muter_id, muted_id, MUTE


_BETWEEN = "SELECT direction FROM blocks WHERE user_id=? AND other_id=?"


class ReadPathBlocks(Statements):
    """A reader's blocks and mutes for the read path, with their direction (``OtherRow``);
    ``page``: rows per slice, each after the last row (not the last id: a pair's rows
    could be cut between a mute and a block)."""

    blocks = Cql("SELECT other_id, direction FROM blocks WHERE user_id=? LIMIT ?", paged=True)
    blocks_after = Cql("SELECT other_id, direction FROM blocks WHERE user_id=? "
                       "AND (other_id, direction) > (?, ?) LIMIT ?", paged=True)
    between = Cql(_BETWEEN)


class FanoutBlocks(Statements):
    """The fan-out's statements on ``blocks``; ``page``: rows per page."""

    # (user_id, other_id, direction, lsn) and (lsn, user_id, other_id, direction)
    add = Cql("INSERT INTO blocks (user_id, other_id, direction) VALUES (?,?,?) USING TIMESTAMP ?")
    delete = Cql("DELETE FROM blocks USING TIMESTAMP ? WHERE user_id=? AND other_id=? AND direction=?")
    between = Cql(_BETWEEN)
    # (other_id, direction) and (user_id, other_id, direction): ``audience_other`` picks.
    others = Cql("SELECT other_id, direction FROM blocks WHERE user_id=?", paged=True)
    others_in = Cql("SELECT user_id, other_id, direction FROM blocks WHERE user_id IN ?", paged=True)
    with_directions = Cql("SELECT other_id, direction FROM blocks WHERE user_id=?", paged=True)
