"""The ranker's store reads its rows by column name (services/ranker/store.py): the
post copy as a rank move sees it, and the feature map. A fake session and runner answer
with the plain tuples the ranker's driver profile returns. No services."""
from __future__ import annotations

import asyncio

from services.ranker.store import KeyState, RankStore
from services.shared.domain.rules import VISIBLE


class _Statement:
    def __init__(self, cql: str) -> None:
        self.cql = cql
        self.consistency_level = self.serial_consistency_level = None


class _Session:
    def prepare(self, cql: str) -> _Statement:
        return _Statement(cql)


class _Runner:
    def __init__(self, rows: list[tuple[object, ...]]) -> None:
        self.rows = rows

    async def execute(self, statement: object, params: object = ()) -> list[tuple[object, ...]]:
        return self.rows


def _store(rows: list[tuple[object, ...]]) -> RankStore:
    return RankStore(_Session(), runner=_Runner(rows))  # type: ignore[arg-type]


def test_key_state_names_the_copy_columns():
    store = _store([(7, 1_795_000_000_000, VISIBLE, False, 2.5, 3.0, 1234)])
    assert asyncio.run(store.key_state(10)) == KeyState(7, 1_795_000_000_000, True, 2.5, 3.0, 1234)
    assert asyncio.run(store.key_state(10)).row_keys == (2.5, 3.0)


def test_key_state_of_a_hidden_or_unmaterialized_copy():
    hidden = _store([(7, 1_795_000_000_000, VISIBLE + 1, False, 2.5, None, None)])
    assert asyncio.run(hidden.key_state(10)) == KeyState(7, 1_795_000_000_000, False, 2.5, None, 0)
    deleted = _store([(7, 1_795_000_000_000, VISIBLE, True, 2.5, None, 9)])
    assert asyncio.run(deleted.key_state(10)).alive is False
    unkeyed = _store([(7, 1_795_000_000_000, VISIBLE, False, None, None, None)])
    assert asyncio.run(unkeyed.key_state(10)) is None
    assert asyncio.run(_store([]).key_state(10)) is None


def test_features_read_the_map_or_nothing():
    assert asyncio.run(_store([({"quality": 0.5},)]).features(10)) == {"quality": 0.5}
    assert asyncio.run(_store([(None,)]).features(10)) == {}
    assert asyncio.run(_store([]).features(10)) == {}
