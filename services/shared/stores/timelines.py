"""Owner of the author timelines: ``author_timeline``.

Table (0005_rank_keys.cql): ``author_timeline (author_id, bucket, rank_key, post_id)``,
every post of every author, partitioned by the day of its Snowflake id
(``services.shared.domain.ids.day_bucket``) and clustered by rank key descending. The
fan-out writes it in microseconds; readers merge the partitions of the celebrities they
follow, and the backfill, the rebuild and the copy audit read an author's days.

- ``ReadPathTimelines``: the API's read path, the top rows of many (author, day)
  partitions in one multi-partition read, from the head or strictly after a key.
- ``FanoutTimelines``: the fan-out's writes of an author's row and its reads of the
  post ids of an author's days.

Deliberate: the read path keeps the driver's plain tuples (``inbox.SourceRow``, the
inbox's shape: the two sources are merged as they come).
"""
from __future__ import annotations

from typing import NamedTuple

from .statements import Cql, Statements


class TimelinePostRow(NamedTuple):
    """``FanoutTimelines.posts_in``: one post of an author's days."""

    post_id: int


class ReadPathTimelines(Statements):
    """([author_id], [bucket], [rank_key, post_id,] per_partition) -> ``SourceRow``s,
    ordered per partition only."""

    top_in = Cql("SELECT rank_key, post_id, author_id FROM author_timeline "
                 "WHERE author_id IN ? AND bucket IN ? PER PARTITION LIMIT ?", fetch_size=5000)
    after_in = Cql("SELECT rank_key, post_id, author_id FROM author_timeline "
                   "WHERE author_id IN ? AND bucket IN ? AND (rank_key, post_id) < (?, ?) "
                   "PER PARTITION LIMIT ?", fetch_size=5000)


class FanoutTimelines(Statements):
    """The fan-out's statements on ``author_timeline``."""

    # (author_id, bucket, rank_key, post_id, key_ts)
    add = Cql("INSERT INTO author_timeline (author_id, bucket, rank_key, post_id) VALUES (?,?,?,?) "
              "USING TIMESTAMP ?")
    # (ts, author_id, bucket, rank_key, post_id)
    delete = Cql("DELETE FROM author_timeline USING TIMESTAMP ? "
                 "WHERE author_id=? AND bucket=? AND rank_key=? AND post_id=?")
    # All day buckets of a window in one request (an IN on the last partition key column):
    # one round trip instead of one per day. Rows are in rank order within a day, so the
    # window's lower bound is applied by the caller, not here.
    posts_in = Cql("SELECT post_id FROM author_timeline WHERE author_id=? AND bucket IN ?",
                   fetch_size=5000)
