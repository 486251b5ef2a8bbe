"""Owner of the follow copies: ``following`` (reader side) and ``followers`` (author side).

Tables (0001_serving.cql): ``following (follower_id, followed_id) -> following_since`` and
``followers (followed_id, follower_id) -> following_since``, both written by the fan-out
``USING TIMESTAMP <lsn>`` (a replay rewrites the same cells; an unfollow's tombstone
beats a late follow). The follower count is not here: follow_edges, counted_edges.py.

Who uses what:

- ``ReadPathFollows``: the API's read path, a reader's follows with following_since in
  Unix milliseconds (``toUnixTimestamp``: the driver builds no ``datetime`` a row).
- ``FanoutFollows``: the fan-out's writes of both copies, its reads of an author's
  followers (one page at a time, or with other small audiences as one ``IN`` read), and
  the reads its copy audit compares.
- ``FollowedAuthors``: every author a reader follows, paged (reader activity's flags,
  the copy audit, the inbox rebuild); ``followed_by`` reads them all.
- ``ReadPathFollowLists``: the API's follower and following lists (``GET
  /v1/users/{id}/followers|following``): a user's partition of either copy, at most
  ``LIMIT`` rows in one page (the set's ``page``), following_since in Unix ms; both
  copies are clustered by user id, so the caller sorts by time (docs/api.md).

Deliberate: the read path's rows and the fan-out's follower pages stay the driver's
tuples (``FollowMs``; ``FollowerRow``'s shape, made ``audience.Follower`` without a call
a row): a follower page is read for every page of inbox rows written, a reader's follows
for every feed page. Single-row reads are made typed rows (``SinceRow._make``).
"""
from __future__ import annotations

from datetime import datetime
from typing import NamedTuple, TypeAlias

from .cql_async import CqlRunner
from .statements import Cql, Statements


class FollowedRow(NamedTuple):
    """``FollowedAuthors.followed``: one author a reader follows."""

    followed_id: int


class SinceRow(NamedTuple):
    """One follow's row of either copy (``since`` reads): naive UTC from the driver."""

    following_since: datetime | None


class WrittenRow(NamedTuple):
    """``FanoutFollows.follower_written``: the write time of the author-side row (the LSN
    of the change that wrote it)."""

    written: int | None


class FollowerRow(NamedTuple):
    """``FanoutFollows.followers``: one follower of an author (naive UTC)."""

    follower_id: int
    following_since: datetime


class AudienceRow(NamedTuple):
    """``FanoutFollows.followers_in``: a follower row with its author first (the coalesced
    read's partition key)."""

    followed_id: int
    follower_id: int
    following_since: datetime


# The read path's rows as its tuple profile returns them (services/api/copies/store.py):
# (followed_id, following_since in Unix ms), and (following_since in Unix ms,).
FollowMs: TypeAlias = tuple[int, int | None]
SinceMs: TypeAlias = tuple[int | None]


class ReadPathFollows(Statements):
    """A reader's follows for the read path; ``page``: the most a reader may follow."""

    following = Cql("SELECT followed_id, toUnixTimestamp(following_since) FROM following "
                    "WHERE follower_id=? LIMIT ?", paged=True)
    following_from = Cql("SELECT followed_id, toUnixTimestamp(following_since) FROM following "
                         "WHERE follower_id=? AND followed_id >= ? LIMIT ?")
    following_among = Cql("SELECT followed_id, toUnixTimestamp(following_since) "
                          "FROM following WHERE follower_id=? AND followed_id IN ?")
    following_one = Cql("SELECT toUnixTimestamp(following_since) FROM following "
                        "WHERE follower_id=? AND followed_id=?")


class FanoutFollows(Statements):
    """The fan-out's statements on both copies; ``page``: followers per page."""

    add_follower = Cql("INSERT INTO followers (followed_id, follower_id, following_since) "
                       "VALUES (?,?,?) USING TIMESTAMP ?")
    add_following = Cql("INSERT INTO following (follower_id, followed_id, following_since) "
                        "VALUES (?,?,?) USING TIMESTAMP ?")
    delete_follower = Cql("DELETE FROM followers USING TIMESTAMP ? WHERE followed_id=? AND follower_id=?")
    delete_following = Cql("DELETE FROM following USING TIMESTAMP ? WHERE follower_id=? AND followed_id=?")
    # (followed_id, follower_id) -> SinceRow / WrittenRow
    follower_since = Cql("SELECT following_since FROM followers WHERE followed_id=? AND follower_id=?")
    follower_written = Cql("SELECT WRITETIME(following_since) FROM followers "
                           "WHERE followed_id=? AND follower_id=?")
    # (follower_id, followed_id) -> SinceRow
    following_since = Cql("SELECT following_since FROM following WHERE follower_id=? AND followed_id=?")
    # followed_id -> FollowerRow pages
    followers = Cql("SELECT follower_id, following_since FROM followers WHERE followed_id=?", paged=True)
    # [followed_id] -> AudienceRow (services/shared/stores/read_coalescer.py)
    followers_in = Cql("SELECT followed_id, follower_id, following_since FROM followers "
                       "WHERE followed_id IN ?", fetch_size=5000)


class ReadPathFollowLists(Statements):
    """(user_id, limit) -> ``FollowMs`` rows of one user's partition; ``page``: the most
    a list reads (one page holds them all)."""

    followers_of = Cql("SELECT follower_id, toUnixTimestamp(following_since) FROM followers "
                       "WHERE followed_id=? LIMIT ?", paged=True)
    following_of = Cql("SELECT followed_id, toUnixTimestamp(following_since) FROM following "
                       "WHERE follower_id=? LIMIT ?", paged=True)
    # user_id -> (count,): only for a following partition longer than the list reads.
    following_count = Cql("SELECT COUNT(*) FROM following WHERE follower_id=?")


class FollowedAuthors(Statements):
    """The authors a reader follows; ``page``: rows per page."""

    followed = Cql("SELECT followed_id FROM following WHERE follower_id=?", paged=True)


async def followed_by(runner: CqlRunner, statements: FollowedAuthors, reader_id: int) -> list[int]:
    """Every author ``reader_id`` follows (the ``following`` copy), a page at a time."""
    out: list[int] = []
    async for rows in runner.pages(statements.followed, (reader_id,)):
        out.extend(int(r[0]) for r in rows)
    return out
