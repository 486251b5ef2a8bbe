"""How a service process runs Python: the garbage collector, the GIL's switch interval,
and the collector's pauses as metrics.

The API and the stream workers (fan-out, ranker) call ``tune`` once their stores are open;
the benchmarks' baselines run under ``collector_tuned``, so no comparison credits one side
with a tuning the other lacks. Why, and what it bought: docs/read-path.md, "The process"
(the API), and docs/fanout.md, "Benchmark" (the workers).
"""
from __future__ import annotations

import gc
import sys
import time
import weakref
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.registry import Collector

# Bounds of the pause histogram (seconds).
PAUSE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25)


@dataclass
class GcPauses:
    """Collector pauses by generation, counted by ``gc.callbacks`` (a few arithmetic
    operations per collection; ``tune`` makes collections rare enough not to matter)."""

    buckets: list[list[int]] = field(default_factory=lambda: [[0] * (len(PAUSE_BUCKETS) + 1) for _ in range(3)])
    sums: list[float] = field(default_factory=lambda: [0.0] * 3)
    _started: float = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        took = time.perf_counter() - self._started
        generation = info["generation"]
        self.sums[generation] += took
        row = self.buckets[generation]
        for i, bound in enumerate(PAUSE_BUCKETS):
            if took <= bound:
                row[i] += 1
                return
        row[-1] += 1


class GcCollector(Collector):
    def __init__(self, pauses: GcPauses) -> None:
        self._pauses = pauses

    def collect(self) -> Iterator[HistogramMetricFamily]:
        family = HistogramMetricFamily("python_gc_pause_seconds",
                                       "Garbage-collector pauses of this process by generation",
                                       labels=("generation",))
        for generation, row in enumerate(self._pauses.buckets):
            cumulative, out = 0, []
            for bound, count in zip((*PAUSE_BUCKETS, float("inf")), row):
                cumulative += count
                out.append(("+Inf" if bound == float("inf") else str(bound), cumulative))
            family.add_metric((str(generation),), out, self._pauses.sums[generation])
        yield family


_pauses: GcPauses | None = None
# The registries that have the pause metric (weakly: a registry's id can be reused once
# it is gone, as the tests' throwaway registries are).
_registered: weakref.WeakSet[CollectorRegistry] = weakref.WeakSet()


def _set_collector(gen0_threshold: int, freeze: bool) -> None:
    """The first generation's threshold (0: Python's), and what exists now frozen."""
    if gen0_threshold > 0:
        _, gen1, gen2 = gc.get_threshold()
        gc.set_threshold(gen0_threshold, gen1, gen2)
    if freeze:
        gc.collect()
        gc.freeze()


def tune(registry: CollectorRegistry, *, gen0_threshold: int, switch_interval_s: float,
         freeze: bool) -> None:
    """Apply the process settings (after start-up: what exists now is frozen) and
    register the pause metric in ``registry``. One callback per process, and one metric
    per registry, however many apps it builds (tests)."""
    global _pauses
    if _pauses is None:
        _pauses = GcPauses()
        gc.callbacks.append(_pauses)
    if registry not in _registered:
        _registered.add(registry)
        registry.register(GcCollector(_pauses))
    if switch_interval_s > 0:
        sys.setswitchinterval(switch_interval_s)
    _set_collector(gen0_threshold, freeze)


@contextmanager
def collector_tuned(gen0_threshold: int, freeze: bool = True) -> Iterator[None]:
    """``tune``'s collector settings for a block (a benchmark's baseline client in the
    benchmark's own process), restored after it."""
    thresholds = gc.get_threshold()
    _set_collector(gen0_threshold, freeze)
    try:
        yield
    finally:
        if freeze:
            gc.unfreeze()
        gc.set_threshold(*thresholds)
