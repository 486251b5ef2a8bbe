"""A post's inbox rows go out as unlogged batches of readers that share their replicas."""
from __future__ import annotations

import asyncio
import re
import struct
from types import SimpleNamespace

from services.fanout.inbox import PUSH_BATCH_ROWS, InboxStore


class _Metadata:
    def __init__(self, hosts: int) -> None:
        self.hosts = [f"h{i}" for i in range(hosts)]

    def all_hosts(self):
        return self.hosts

    def get_replicas(self, keyspace, key):
        reader = struct.unpack(">q", key)[0]
        return [self.hosts[reader % len(self.hosts)]]  # one replica, chosen by the key


class _Session:
    keyspace = "feed"

    def __init__(self, hosts: int) -> None:
        self.cluster = SimpleNamespace(metadata=_Metadata(hosts))

    def prepare(self, cql):
        # A plain string: the driver's batch renders its parameters into the text.
        return _Cql(cql.replace("?", "%s"))


class _Cql(str):
    fetch_size = None


class _Runner:
    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.statements: list[list[str]] = []
        self.running = self.peak = 0

    async def execute(self, batch, params=()):
        self.running += 1
        self.peak = max(self.peak, self.running)
        await asyncio.sleep(0)
        texts = [text for _prepared, text, _params in batch._statements_and_parameters]
        self.statements.append(texts)
        self.batches.append([int(m.group(1)) for t in texts
                             if (m := re.search(r"VALUES \((\d+),", t))])
        self.running -= 1
        return []


def _store(hosts: int, runner: _Runner) -> InboxStore:
    return InboxStore(_Session(hosts), runner, max_in_flight=64, cap=500, trim_every=32,  # type: ignore[arg-type]
                      push_batches_in_flight=3)


def test_single_node_rows_go_in_batches_of_fifty():
    store = _store(1, _Runner())
    assert store._by_replicas(range(120)) == [list(range(120))]
    assert store._by_replicas([]) == []


def test_rows_are_grouped_by_replica_set():
    store = _store(3, _Runner())
    groups = store._by_replicas(range(9))
    assert sorted(groups) == [[0, 3, 6], [1, 4, 7], [2, 5, 8]]


def test_push_writes_every_row_once_with_bounded_batches_in_flight():
    runner = _Runner()
    store = _store(2, runner)
    written = asyncio.run(store.push(range(1, 301), post_id=9, author_id=5, rank_key=1.5, key_ts=7))
    assert written == 300
    assert len(runner.batches) == 2 * -(-150 // PUSH_BATCH_ROWS)  # 3 batches per replica set
    assert runner.peak <= 3
    rows = [r for batch in runner.batches for r in batch]
    assert sorted(rows) == list(range(1, 301))
    assert all(len({r % 2 for r in batch}) == 1 for batch in runner.batches)  # one replica set each


def test_a_move_keeps_each_readers_tombstone_and_new_row_in_one_batch():
    runner = _Runner()
    store = _store(1, runner)
    written = asyncio.run(store.move(range(1, 61), post_id=9, author_id=5, old_keys=[1.5, 2.0],
                                     new_key=3.0, key_ts=8, ttl_s=100))
    assert written == 60
    texts = [text for batch in runner.statements for text in batch]
    assert len(texts) == 60 * 3                        # two tombstones and a row per reader
    for batch in runner.statements:
        readers = [int(re.search(r"reader_id=(\d+)|VALUES \((\d+),", t).group(1)
                       or re.search(r"VALUES \((\d+),", t).group(1)) for t in batch]
        assert len(batch) <= PUSH_BATCH_ROWS and len(batch) % 3 == 0
        for i in range(0, len(readers), 3):            # a reader never spans two batches
            assert readers[i] == readers[i + 1] == readers[i + 2]
