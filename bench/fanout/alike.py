"""Cost per inbox row charged alike: each side's window runs until Cassandra has flushed
what it wrote and no compaction is pending or running.

A rows/s window ends when the last write is acknowledged. What the writes cost Cassandra
afterwards (memtable flushes, the compactions of those sstables) falls in whatever
window comes next, so per-row CPU taken over rows/s windows favours whichever side ran
before another. Here every side (``bench/fanout/rows.py``: the fan-out, the best raw
writer, the floor) is measured the same way, each into its own table:

1. settle first (flush the keyspace, wait for compactions: nothing earlier is left to
   charge to this side);
2. take every component's CPU (the client or worker, Cassandra, Kafka);
3. run the side;
4. settle again, and take the CPU again: the difference over the side's rows is its cost
   per row, its flushes and compactions included.

The worker and the brokers stay up through the others' windows; their idle CPU there
(metrics, heartbeats) is charged to each side alike.
"""
from __future__ import annotations

import re
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterator, Mapping

from deploy.stack.cassandra import nodetool
from deploy.stack.layout import Layout

POLL_S = 2.0
_PENDING = re.compile(r"^pending tasks\s*:?\s*(\d+)", re.IGNORECASE | re.MULTILINE)
# The header of the table of running compactions, printed only when there are some.
_RUNNING = re.compile(r"^\s*id\s+compaction type", re.IGNORECASE | re.MULTILINE)


def settle(keyspace: str, timeout_s: float = 900.0) -> float:
    """Flush every table of ``keyspace`` on every node, then wait until no node has a
    compaction pending or running; the seconds it took."""
    layout = Layout.from_env()
    start = time.monotonic()
    nodes = range(1, layout.nodes + 1)
    for node in nodes:
        nodetool(layout, "flush", keyspace, node=node)
    while True:
        busy = [node for node in nodes if _compacting(nodetool(layout, "compactionstats", node=node))]
        if not busy:
            return time.monotonic() - start
        if time.monotonic() - start > timeout_s:
            raise SystemExit(f"bench: compactions still running on node(s) {busy} after {timeout_s:.0f} s")
        time.sleep(POLL_S)


def _compacting(stats: str) -> bool:
    """Whether ``nodetool compactionstats`` shows a compaction pending or running."""
    pending = _PENDING.search(stats)
    if pending is None:
        raise SystemExit(f"bench: unexpected nodetool compactionstats output: {stats[:200]!r}")
    return int(pending.group(1)) > 0 or _RUNNING.search(stats) is not None


@dataclass
class Charge:
    """CPU seconds each component spent in one side's settled window, and its rows."""

    side: str
    rows: int = 0
    seconds: float = 0.0
    settle_s: float = 0.0
    cpu_s: dict[str, float] = field(default_factory=dict)

    def per_row_us(self) -> dict[str, float]:
        return {name: round(cpu * 1e6 / self.rows, 1) for name, cpu in self.cpu_s.items()} if self.rows else {}

    def summary(self) -> dict[str, object]:
        return {"side": self.side, "rows": self.rows, "seconds to the last write": round(self.seconds, 2),
                "seconds to settle after it": round(self.settle_s, 1),
                "CPU µs per row (computed)": self.per_row_us()}


@contextmanager
def charged(side: str, keyspace: str, meters: Mapping[str, Callable[[], float]]) -> Iterator[Charge]:
    """``with charged(...) as c: ...; c.rows = n``: the CPU of every meter (CPU seconds so
    far of a component) from a settled start to a settled end."""
    settle(keyspace)
    charge = Charge(side)
    before = {name: meter() for name, meter in meters.items()}
    start = time.perf_counter()
    yield charge
    charge.seconds = time.perf_counter() - start
    charge.settle_s = settle(keyspace)
    charge.cpu_s = {name: meter() - before[name] for name, meter in meters.items()}


def table(charges: list[Charge], components: tuple[str, ...]) -> str:
    """The sides side by side: µs per row of each component (computed)."""
    lines = ["| side | rows | " + " | ".join(f"{c} µs/row" for c in components) + " |",
             "| --- | ---: | " + " | ".join("---:" for _ in components) + " |"]
    for c in charges:
        per = c.per_row_us()
        lines.append(f"| {c.side} | {c.rows:,} | " + " | ".join(
            f"{per.get(name, float('nan')):.1f}" for name in components) + " |")
    return "\n".join(lines)
