"""Which statements ``WriteCoalescer`` refuses to batch with other partitions' rows."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from services.shared.stores.write_coalescer import _refused


@pytest.mark.parametrize("query, refused", [
    ("INSERT INTO feed_inbox (reader_id, rank_key, post_id, author_id) VALUES (?,?,?,?) "
     "USING TTL ? AND TIMESTAMP ?", False),
    ("UPDATE posts USING TIMESTAMP ? SET fanned_out=? WHERE post_id=?", False),
    ("DELETE FROM feed_inbox USING TIMESTAMP ? WHERE reader_id=? AND rank_key < ?", False),
    ("INSERT INTO author_tiers (author_id, tier) VALUES (?,?) IF NOT EXISTS", True),
    ("UPDATE follow_edges SET followers=? WHERE followed_id=? IF followers=?", True),
    ("update like_counts set likes = likes + ? where post_id = ?", True),
    ("UPDATE t SET n = n - 1 WHERE k = ?", True),
])
def test_conditional_and_counter_statements_are_refused(query: str, refused: bool) -> None:
    assert _refused(SimpleNamespace(query_string=query)) is refused  # type: ignore[arg-type]
