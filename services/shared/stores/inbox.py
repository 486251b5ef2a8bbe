"""Owner of the reader inboxes: ``feed_inbox``.

Table (0005_rank_keys.cql): ``feed_inbox (reader_id, rank_key, post_id) -> author_id``,
clustered by rank key descending, so a first page reads the top of the partition. The
fan-out writes it in microseconds with a TTL (``USING TTL ? AND TIMESTAMP ?``) and trims
a partition's tail with one range tombstone.

- ``ReadPathInbox``: the API's read path, the top of a reader's inbox, from the head or
  strictly after a ``(rank_key, post_id)``.
- ``FanoutInbox``: the fan-out's push, unpush (a move is both, in one batch), trim, and
  its reads of a whole partition and of heads (alone, or as one coalesced ``IN`` read).

Deliberate: the read path keeps the driver's plain tuples (``SourceRow``: inbox rows
are merged, sorted and packed as they come; tuple order is the feed order), so does the
fan-out's head read (a rank key a row). ``InboxEntry`` names the same columns.
"""
from __future__ import annotations

from typing import NamedTuple, TypeAlias

from .statements import Cql, Statements


class InboxEntry(NamedTuple):
    """A row of a reader's inbox (``FanoutInbox.rows``; the read path's ``SourceRow``)."""

    rank_key: float
    post_id: int
    author_id: int


class HeadRow(NamedTuple):
    """``FanoutInbox.heads_in``: a rank key of the top of a reader's inbox."""

    reader_id: int
    rank_key: float


# A feed_inbox or author_timeline row as the read path's tuple profile returns it:
# (rank_key, post_id, author_id), ``InboxEntry``'s order.
SourceRow: TypeAlias = tuple[float, int, int]


class ReadPathInbox(Statements):
    """(reader_id, [rank_key, post_id,] limit) -> ``SourceRow``s in feed order."""

    top = Cql("SELECT rank_key, post_id, author_id FROM feed_inbox "
              "WHERE reader_id=? LIMIT ?")
    after = Cql("SELECT rank_key, post_id, author_id FROM feed_inbox "
                "WHERE reader_id=? AND (rank_key, post_id) < (?, ?) LIMIT ?")


class FanoutInbox(Statements):
    """The fan-out's statements on ``feed_inbox``."""

    # (reader_id, rank_key, post_id, author_id, ttl_s, key_ts)
    push = Cql("INSERT INTO feed_inbox (reader_id, rank_key, post_id, author_id) "
               "VALUES (?,?,?,?) USING TTL ? AND TIMESTAMP ?")
    # (ts, reader_id, rank_key, post_id)
    unpush = Cql("DELETE FROM feed_inbox USING TIMESTAMP ? "
                 "WHERE reader_id=? AND rank_key=? AND post_id=?")
    # (ts, reader_id, boundary): every row below the boundary, one range tombstone
    trim = Cql("DELETE FROM feed_inbox USING TIMESTAMP ? WHERE reader_id=? AND rank_key < ?")
    # (reader_id, limit) -> (rank_key,)
    head = Cql("SELECT rank_key FROM feed_inbox WHERE reader_id=? LIMIT ?")
    # ([reader_id], per-partition limit) -> HeadRow (services/shared/stores/read_coalescer.py)
    heads_in = Cql("SELECT reader_id, rank_key FROM feed_inbox WHERE reader_id IN ? PER PARTITION LIMIT ?")
    # reader_id -> InboxEntry pages
    rows = Cql("SELECT rank_key, post_id, author_id FROM feed_inbox WHERE reader_id=?", fetch_size=1000)
