"""How a service process runs Python: the garbage collector, the GIL's switch interval,
and the collector's pauses as metrics. The API and the stream workers (fan-out, ranker)
call ``tune`` once their stores are open; the benchmark's baselines in the same run
(the raw Cassandra writer, the fan-out's floor) run under ``collector_tuned``, the same
collector settings, so no comparison credits one side with a tuning the other lacks.

An API process is one event-loop thread doing nearly all the work, beside the Cassandra
driver's I/O thread, which reads and writes every request's bytes. Measured under the
read benchmark (``bench/read/ab.py``, 2026-12-01, demo graph, 16 connections, one worker):

* **Full collections paused the loop 55-115 ms**, three to five times in 40 s, and gen1
  collections over 3 ms about once a second: every request in flight waited (first-page
  p95 of single runs 60-430 ms against a median of 30 ms). What they freed was the
  driver's finished futures (``cql_async.release`` now frees those by reference
  counting); what they walked was mostly made at start-up (modules, routes, models, the
  driver's metadata: ~105,000 objects) and lives as long as the process. ``tune``
  freezes that (``gc.freeze``: collections skip it) and raises the first generation's
  threshold to 20,000, so requests that allocate and free without cycles rarely trigger
  a collection at all. Together: one gen0 collection (6 ms) in 6 runs of 8 s, and no
  full collection after start-up (``python_gc_pause_seconds``).
* **The driver's I/O thread waited for the GIL.** The loop thread holds it; a thread
  that wants it gets it after the switch interval (5 ms by default), once per socket
  event. Snapshot batches written behind the page took a median 250 ms and up to 1 s.
  At 0.5 ms every batch took under 250 ms, 80 % under 100 ms
  (``feed_snapshot_write_seconds``), with no measurable cost in pages per second.

Measured with ``bench/read/ab.py`` (2026-12-01, demo graph and 30 days x 500 follows,
16 connections, one worker, medians of 3 runs each against the code before): first-page
p95 37 -> 27 ms and 35 -> 28 ms, pages/s 0.93x and 1.01x (the code before lost a third
of its snapshot writes, which this one stores: docs/read-path.md).

A fan-out worker allocates a follower row, a key and a batch entry for every inbox row
it writes (tuples and lists: objects the collector tracks), so at the default threshold
(700) it ran a collection every few posts, each walking faust's, aiokafka's and the
driver's start-up objects. The same two settings (``worker_gc_*``), in single runs of
``python -m bench.fanout --authors 200 --followers 100 --posts 10`` (2026-12-04), took its
CPU per inbox row from 19.6-21.6 µs to 12.6-14.0 µs and its rows/s from 33-35k to 46-48k;
with that session's other two changes, alternated with the worker before them, 21-28 ->
15 µs a row and 25-31k -> 41-43k rows/s (``bench/results/2026-12-04-fanout-s25/``). The
switch interval made no measurable difference there and is left at Python's default
for workers. The ranker gets the same settings; it was not measured on its own.
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
