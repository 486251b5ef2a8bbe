"""Process settings of the services and the collector-pause metric (services/shared/runtime.py)."""
from __future__ import annotations

import gc
import sys

from prometheus_client import CollectorRegistry, generate_latest

from services.shared import runtime


def test_pauses_are_counted_by_generation_in_cumulative_buckets() -> None:
    pauses = runtime.GcPauses()
    clock = iter([1.0, 1.002, 5.0, 5.3])
    real = runtime.time.perf_counter
    runtime.time.perf_counter = lambda: next(clock)  # type: ignore[assignment]
    try:
        pauses("start", {"generation": 2})
        pauses("stop", {"generation": 2})   # 2 ms
        pauses("start", {"generation": 2})
        pauses("stop", {"generation": 2})   # 300 ms: past the last bound
    finally:
        runtime.time.perf_counter = real  # type: ignore[assignment]
    registry = CollectorRegistry()
    registry.register(runtime.GcCollector(pauses))
    text = generate_latest(registry).decode()
    assert 'python_gc_pause_seconds_bucket{generation="2",le="0.001"} 0.0' in text
    assert 'python_gc_pause_seconds_bucket{generation="2",le="0.0025"} 1.0' in text
    assert 'python_gc_pause_seconds_bucket{generation="2",le="0.25"} 1.0' in text
    assert 'python_gc_pause_seconds_bucket{generation="2",le="+Inf"} 2.0' in text
    assert 'python_gc_pause_seconds_count{generation="0"} 0.0' in text
    assert abs(pauses.sums[2] - 0.302) < 1e-9


def test_tune_sets_the_process_and_observes_real_collections() -> None:
    thresholds, interval = gc.get_threshold(), sys.getswitchinterval()
    try:
        registry = CollectorRegistry()
        runtime.tune(registry, gen0_threshold=12_345, switch_interval_s=0.001, freeze=True)
        assert gc.get_threshold()[0] == 12_345 and sys.getswitchinterval() == 0.001
        assert gc.get_freeze_count() > 0
        gc.collect()
        text = generate_latest(registry).decode()
        assert 'python_gc_pause_seconds_count{generation="2"}' in text
        assert 'python_gc_pause_seconds_count{generation="2"} 0.0' not in text
        runtime.tune(CollectorRegistry(), gen0_threshold=0, switch_interval_s=0, freeze=False)
        assert gc.callbacks.count(runtime._pauses) == 1  # one callback however many apps
        runtime.tune(registry, gen0_threshold=0, switch_interval_s=0, freeze=False)  # no duplicate metric
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)
        sys.setswitchinterval(interval)



def test_collector_tuned_restores_the_collector_after_the_block() -> None:
    thresholds, frozen = gc.get_threshold(), gc.get_freeze_count()
    with runtime.collector_tuned(23_456):
        assert gc.get_threshold() == (23_456, *thresholds[1:])
        assert gc.get_freeze_count() > frozen
    assert gc.get_threshold() == thresholds
    assert gc.get_freeze_count() == frozen
