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
        self.running = self.peak = 0

    async def execute(self, batch, params=()):
        self.running += 1
        self.peak = max(self.peak, self.running)
        await asyncio.sleep(0)
        self.batches.append([int(re.search(r"VALUES \((\d+),", text).group(1))
                             for _prepared, text, _params in batch._statements_and_parameters])
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
    written = asyncio.run(store.push(range(1, 301), post_id=9, author_id=5, lsn=7))
    assert written == 300
    assert len(runner.batches) == 2 * -(-150 // PUSH_BATCH_ROWS)  # 3 batches per replica set
    assert runner.peak <= 3
    rows = [r for batch in runner.batches for r in batch]
    assert sorted(rows) == list(range(1, 301))
    assert all(len({r % 2 for r in batch}) == 1 for batch in runner.batches)  # one replica set each
