"""Which statements the driver may send to a second coordinator (services/common/cql.py)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
from cassandra import ConsistencyLevel
from cassandra.cqltypes import BooleanType, ListType, LongType, UTF8Type
from cassandra.query import PreparedStatement

from services.common.cql import SpeculableBatch, speculable


def prepared(query: str, *types: type, consistency: int | None = None) -> PreparedStatement:
    """A stand-in with what ``speculable`` reads of a prepared statement."""
    columns = [SimpleNamespace(keyspace="feed", table="t", name=f"c{i}", type=t) for i, t in enumerate(types)]
    stmt = PreparedStatement.__new__(PreparedStatement)
    stmt.query_string, stmt.column_metadata, stmt.consistency_level = query, columns, consistency
    stmt.is_idempotent = False
    return stmt


@pytest.mark.parametrize("query", [
    "SELECT rank_key FROM feed_inbox WHERE reader_id=? LIMIT ?",
    "INSERT INTO feed_inbox (reader_id, rank_key, post_id, author_id) VALUES (?,?,?,?) USING TTL ? AND TIMESTAMP ?",
    "DELETE FROM feed_inbox USING TIMESTAMP ? WHERE reader_id=? AND rank_key < ?",
    "UPDATE posts USING TIMESTAMP ? SET features = features + ? WHERE post_id=?",
    "update posts using timestamp ?\n   set rank_key=? where post_id=?",
])
def test_reads_and_writes_stamped_by_the_caller_are_speculable(query: str) -> None:
    assert speculable(prepared(query, LongType))


@pytest.mark.parametrize("query", [
    # stamped by the coordinator's clock: a late second copy could overwrite a newer write
    "UPDATE posts SET score=? WHERE post_id=?",
    "INSERT INTO author_tiers (author_id, tier, changed_at, followers) VALUES (?,?,?,?)",
    # conditional: the second copy would see the first one's result as a lost condition
    "UPDATE follow_edges SET following=?, lsn=? WHERE followed_id=? AND follower_id=? IF lsn=?",
    "INSERT INTO t (a) VALUES (?) USING TIMESTAMP ? IF NOT EXISTS",
])
def test_coordinator_stamped_and_conditional_writes_are_not(query: str) -> None:
    assert not speculable(prepared(query, LongType))


def test_a_list_write_is_not_speculable_even_when_stamped() -> None:
    # Each write of a list gives its elements new cell ids: two copies duplicate them.
    media = ListType.apply_parameters([UTF8Type])
    assert not speculable(prepared("UPDATE posts USING TIMESTAMP ? SET media_ids=? WHERE post_id=?",
                                   LongType, media, LongType))
    assert speculable(prepared("UPDATE posts USING TIMESTAMP ? SET deleted=? WHERE post_id=?",
                               LongType, BooleanType, LongType))


def test_a_paxos_read_is_not_speculable() -> None:
    query = "SELECT lsn FROM follow_edges WHERE followed_id=?"
    assert not speculable(prepared(query, LongType, consistency=ConsistencyLevel.SERIAL))
    assert not speculable(prepared(query, LongType, consistency=ConsistencyLevel.LOCAL_SERIAL))


def test_a_speculable_batch_takes_only_speculable_statements() -> None:
    batch = SpeculableBatch()
    assert batch.is_idempotent
    with pytest.raises(ValueError):
        batch.add(prepared("UPDATE posts SET score=? WHERE post_id=?", LongType))
