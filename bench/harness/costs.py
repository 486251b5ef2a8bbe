"""What a unit of work costs, per component, measured over a window of a bench run: the
inputs of the capacity model (bench/run/capacity.py, docs/capacity.md).

A ``CostMeter`` reads, at its start and its end, the CPU seconds of every service process
(the process and its children, from /proc) and of the stack's JVMs and Postgres, and the
records ever written to every topic of the run's prefix (sum of partition end offsets).
The window's work is counted by the caller (inbox rows, posts announced, pages). Shares
of one machine: each component's CPU is its own; the machine's other work only slows the
window, it is not charged to anyone.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from bench.harness.pipeline import records_in
from bench.harness.servers import stack_cpu_meter
from bench.harness.wrk_load import tree_cpu_s
from services.shared.contracts.topics import all_topics
from services.shared.settings import Settings

STACK = ("cassandra", "kafka", "postgres")


def records_written(settings: Settings) -> int:
    """Records ever written to every topic of ``settings.topic_prefix`` (end offsets)."""
    prefix = settings.topic_prefix
    names = {t.name for t in all_topics(prefix)}
    return sum(records_in(settings, lambda n: n in names or n.startswith(prefix + ".")).values())


@dataclass
class CostMeter:
    """CPU seconds per component and Kafka records over a window: ``start()``, then
    ``stop()``; ``services`` maps a service name to its pid."""

    settings: Settings
    services: dict[str, int]
    _meters: dict[str, Callable[[], float]] = field(default_factory=dict)
    _start: dict[str, float] = field(default_factory=dict)
    _records: int = 0
    _t: float = 0.0
    result: dict[str, float] = field(default_factory=dict)

    def start(self) -> "CostMeter":
        self._meters = {name: (lambda p=pid: tree_cpu_s(p)) for name, pid in self.services.items()}
        self._meters.update({kind: stack_cpu_meter(kind) for kind in STACK})
        self._start = {name: m() for name, m in self._meters.items()}
        self._records = records_written(self.settings)
        self._t = time.monotonic()
        return self

    def stop(self) -> dict[str, float]:
        seconds = time.monotonic() - self._t
        self.result = {f"{name} CPU-s": round(m() - self._start[name], 2) for name, m in self._meters.items()}
        self.result["kafka records written"] = records_written(self.settings) - self._records
        self.result["window s"] = round(seconds, 1)
        return self.result


def per_unit_us(cpu: dict[str, float], component: str, units: float) -> float | None:
    """µs of ``component``'s CPU per unit of work (computed), None without work."""
    seconds = cpu.get(f"{component} CPU-s")
    return round(seconds * 1e6 / units, 2) if seconds is not None and units > 0 else None
