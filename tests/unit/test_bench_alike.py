"""bench/fanout/alike.py: reading ``nodetool compactionstats`` and the per-row table."""
from __future__ import annotations

import pytest

from bench.fanout.alike import Charge, _compacting, table

IDLE = ("concurrent compactors            1           \npending tasks                    0           \n"
        "compactions completed            399         \ncompaction throughput (MiB/s)    64.0        \n")
RUNNING = ("pending tasks                    0\n"
           "id                                   compaction type keyspace table completed total unit  progress\n"
           "8e2d...                              Compaction      ks       t     10        20    bytes 50.00%\n"
           "Active compaction remaining time :   0h00m01s\n")


def test_idle_pending_and_running_compactions_are_told_apart() -> None:
    assert not _compacting(IDLE)
    assert _compacting(IDLE.replace("pending tasks                    0", "pending tasks                    3"))
    assert _compacting("pending tasks: 2\n- ks.t: 2\n")          # the older layout
    assert _compacting(RUNNING)


def test_output_it_cannot_read_stops_the_bench() -> None:
    with pytest.raises(SystemExit):
        _compacting("error: connection refused")


def test_cpu_per_row_side_by_side() -> None:
    fan = Charge("fan-out", rows=1000, cpu_s={"client": 0.02, "Cassandra": 0.05})
    floor = Charge("floor", rows=2000, cpu_s={"client": 0.01, "Cassandra": 0.04})
    assert fan.per_row_us() == {"client": 20.0, "Cassandra": 50.0}
    text = table([fan, floor], ("client", "Cassandra"))
    assert "| fan-out | 1,000 | 20.0 | 50.0 |" in text and "| floor | 2,000 | 5.0 | 20.0 |" in text
    assert Charge("empty").per_row_us() == {}
