"""The tables' owners state their statements once (services/shared/stores/statements.py):
a set prepares each of its statements for the session it is made with, pages of the size
its user gives, and its class keeps the text. No services."""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from services.shared.stores.blocks import BlockRow, FanoutBlocks, audience_other, both_ways, mute_row
from services.shared.stores.follows import FanoutFollows, ReadPathFollows
from services.shared.stores.inbox import FanoutInbox
from services.shared.stores.posts import FanoutPosts
from services.shared.stores.statements import Cql, Statements


class _Session:
    def __init__(self) -> None:
        self.prepared: list[str] = []

    def prepare(self, cql: str) -> Any:
        self.prepared.append(cql)
        return SimpleNamespace(cql=cql, fetch_size=None)


class _Set(Statements):
    one = Cql("SELECT a FROM t WHERE k=?")
    paged = Cql("SELECT b FROM t WHERE k=?", paged=True)
    fixed = Cql("SELECT c FROM t WHERE k IN ?", fetch_size=5000)


def test_a_set_prepares_every_statement_once_in_order() -> None:
    session = _Session()
    made = _Set(session, page=100)  # type: ignore[arg-type]
    assert session.prepared == [_Set.one.text, _Set.paged.text, _Set.fixed.text]
    assert made.one.cql == _Set.one.text
    assert (made.one.fetch_size, made.paged.fetch_size, made.fixed.fetch_size) == (None, 100, 5000)
    unpaged = _Set(_Session())  # type: ignore[arg-type]
    assert unpaged.paged.fetch_size is None  # no page given: the session's default


def test_the_owners_page_sizes() -> None:
    follows = ReadPathFollows(_Session(), page=250)  # type: ignore[arg-type]
    assert follows.following.fetch_size == 250 and follows.following_from.fetch_size is None
    fanout = FanoutFollows(_Session(), page=500)  # type: ignore[arg-type]
    assert (fanout.followers.fetch_size, fanout.followers_in.fetch_size) == (500, 5000)
    assert FanoutInbox(_Session()).rows.fetch_size == 1000  # type: ignore[arg-type]


def test_a_post_copy_write_leaves_out_what_a_change_did_not_carry() -> None:
    posts = FanoutPosts(_Session())  # type: ignore[arg-type]
    assert "text=?" in posts.writer(True, False).cql and "media=?" not in posts.writer(True, False).cql
    assert "media=?" in posts.writer(False, True).cql and "text=?" not in posts.writer(False, True).cql
    assert "text=?, media=?" in posts.writer(True, True).cql
    assert "text" not in posts.writer(False, False).cql.split("SET")[1]


def test_a_block_is_two_rows() -> None:
    assert both_ways(1, 2) == ((1, 2, "out"), (2, 1, "in"))
    assert [BlockRow._make(r).pair(2) for r in [(1, "in"), (3, "out")]] == [(1, 2), (2, 3)]
    assert mute_row(1, 2) == (1, 2, "mute")
    assert BlockRow._make((3, "mute")).pair(2) == (2, 3)  # (muter, muted): the partition's user mutes
    assert [audience_other(d) for d in ("out", "in", "mute")] == [True, True, False]
    assert {c.name for c in FanoutBlocks.cqls()} >= {"add", "delete", "between"}
