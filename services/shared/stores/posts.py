"""Owner of the post copies: ``posts`` (Cassandra's, not Postgres's table of the same name).

Table (0001_serving.cql, 0002, 0005, 0011): ``posts (post_id) -> author_id, created_at,
text, media, visibility, deleted, fanned_out, score, features, rank_key,
rank_key_next``. The fan-out writes the copy ``USING TIMESTAMP <lsn>`` (its rank-key
cells in microseconds, 0005_rank_keys.cql); the ranker writes score and features and
the key a post's rows move to.

- ``ReadPathPosts``: the API's read path, the state of up to a chunk of posts in one
  ``IN`` read, with their text and media ids or without.
- ``FanoutPosts``: the fan-out's writes of the copy (an edit that did not carry text or
  media leaves them out: ``writer``), its rank keys, and its reads of the copy.
- ``RankerPosts``: the ranker's features, score, and the key state a rank move reads.

Deliberate: the read path keeps the driver's plain tuples (``PostRow``, ``PostTextRow``:
a page reads tens of posts, merged and cached as they come; ``PostStateRow`` names the
same columns for a reader of one row). Rows of one post are made typed rows.
"""
from __future__ import annotations

from datetime import datetime
from typing import Mapping, NamedTuple, TypeAlias

from cassandra.query import PreparedStatement

from .statements import Cql, Statements

# The state the read path and a rank move read: creation time in Unix ms, and the rank
# key's write time (µs: the time the post's rank-key rows carry).
_STATE = ("author_id, toUnixTimestamp(created_at), visibility, deleted, "
          "rank_key, rank_key_next, WRITETIME(rank_key)")
# The copy as the fan-out decides on it.
_COPY = ("post_id, author_id, created_at, visibility, deleted, WRITETIME(visibility) AS vis_ts, "
         "fanned_out, score, rank_key, rank_key_next, WRITETIME(rank_key) AS key_ts")


class PostStateRow(NamedTuple):
    """``ReadPathPosts.states``: a post copy's state (``PostRow`` named)."""

    post_id: int
    author_id: int | None
    created_at_ms: int | None   # toUnixTimestamp(created_at)
    visibility: int | None
    deleted: bool | None
    rank_key: float | None
    rank_key_next: float | None
    key_ts: int | None          # WRITETIME(rank_key), µs


# ``PostStateRow`` as the read path's tuple profile returns it, and with the post's text
# after it (``ReadPathPosts.texts``; ``TEXT``: its index).
PostRow: TypeAlias = tuple[int, int | None, int | None, int | None, bool | None,
                           float | None, float | None, int | None]
PostTextRow: TypeAlias = tuple[int, int | None, int | None, int | None, bool | None,
                               float | None, float | None, int | None, str | None,
                               list[str] | None]
TEXT = 8
# The post's media ids (``media``, 0011_post_media_frozen.cql), after its text: immutable
# like the text, so they travel with it into the body cache.
MEDIA = 9


class KeyStateRow(NamedTuple):
    """``RankerPosts.key_state``: ``PostStateRow`` without the post id."""

    author_id: int | None
    created_at_ms: int | None
    visibility: int | None
    deleted: bool | None
    rank_key: float | None
    rank_key_next: float | None
    key_ts: int | None


class CopyRow(NamedTuple):
    """``FanoutPosts.read`` / ``read_in``: the copy as the fan-out decides on it."""

    post_id: int
    author_id: int | None
    created_at: datetime | None   # naive UTC from the driver
    visibility: int | None
    deleted: bool | None
    vis_ts: int | None            # WRITETIME(visibility): the LSN of the copy's last write
    fanned_out: bool | None
    score: float | None
    rank_key: float | None
    rank_key_next: float | None
    key_ts: int | None            # WRITETIME(rank_key), µs


class FeaturesRow(NamedTuple):
    """``RankerPosts.features``."""

    features: Mapping[str, float] | None


def _write(with_text: bool, with_media: bool) -> str:
    """The copy's UPDATE, without the columns a change did not carry (TOAST): binds
    (lsn, author_id, created_at, [text], [media], visibility, deleted, post_id)."""
    cols = ["author_id=?", "created_at=?"] + (["text=?"] if with_text else []) \
        + (["media=?"] if with_media else []) + ["visibility=?", "deleted=?"]
    return f"UPDATE posts USING TIMESTAMP ? SET {', '.join(cols)} WHERE post_id=?"


_SET_RANK_KEY_NEXT = "UPDATE posts USING TIMESTAMP ? SET rank_key_next=? WHERE post_id=?"


class ReadPathPosts(Statements):
    """[post_id] -> ``PostRow`` (``states``) or ``PostTextRow`` (``texts``)."""

    states = Cql(f"SELECT post_id, {_STATE} FROM posts WHERE post_id IN ?")
    texts = Cql(f"SELECT post_id, {_STATE}, text, media FROM posts WHERE post_id IN ?")


class FanoutPosts(Statements):
    """The fan-out's statements on the copy."""

    write_all = Cql(_write(True, True))
    write_no_text = Cql(_write(False, True))
    write_no_media = Cql(_write(True, False))
    write_state = Cql(_write(False, False))
    mark_fanned_out = Cql("UPDATE posts USING TIMESTAMP ? SET fanned_out=? WHERE post_id=?")
    read = Cql(f"SELECT {_COPY} FROM posts WHERE post_id=?")
    read_in = Cql(f"SELECT {_COPY} FROM posts WHERE post_id IN ?")
    # (key_ts, rank_key, post_id)
    set_rank_key = Cql("UPDATE posts USING TIMESTAMP ? SET rank_key=? WHERE post_id=?")
    set_rank_key_next = Cql(_SET_RANK_KEY_NEXT)

    def writer(self, with_text: bool, with_media: bool) -> PreparedStatement:
        """The copy's UPDATE for a change that carried text and media or not."""
        if with_text:
            return self.write_all if with_media else self.write_no_media
        return self.write_no_text if with_media else self.write_state


class RankerPosts(Statements):
    """The ranker's statements on the copy."""

    features = Cql("SELECT features FROM posts WHERE post_id=?")
    # (timestamp_us, features, post_id)
    merge_features = Cql("UPDATE posts USING TIMESTAMP ? SET features = features + ? WHERE post_id=?")
    set_score = Cql("UPDATE posts SET score=? WHERE post_id=?")
    key_state = Cql(f"SELECT {_STATE} FROM posts WHERE post_id=?")
    set_rank_key_next = Cql(_SET_RANK_KEY_NEXT)
