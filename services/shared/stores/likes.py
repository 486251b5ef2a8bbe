"""Owner of the like copies: ``post_likes`` (who likes a post).

Table (0001_serving.cql): ``post_likes (post_id, user_id)``, written by the ranker
``USING TIMESTAMP <lsn>`` (a replay rewrites the same cell; an unlike's tombstone beats a
late like). A post's like count is not here: like_edges, counted_edges.py. Nothing reads
the copy on a request's path yet.
"""
from __future__ import annotations

from .statements import Cql, Statements


class RankerLikes(Statements):
    """The ranker's writes of the copy."""

    # (post_id, user_id, lsn)
    add = Cql("INSERT INTO post_likes (post_id, user_id) VALUES (?,?) USING TIMESTAMP ?")
    # (lsn, post_id, user_id)
    delete = Cql("DELETE FROM post_likes USING TIMESTAMP ? WHERE post_id=? AND user_id=?")
