"""bench/run/drain.py's arithmetic: windows from samples, and what counts as a collapse."""
from __future__ import annotations

from bench.run.drain import Sample, summary, windows


def _samples(per_window: list[tuple[float, int]]) -> list[Sample]:
    """Samples 5 s apart; each window applies ``follows`` follows (copies, then counts)
    with ``lag`` left after."""
    out, done = [Sample(0.0, {"public.follows": 0.0, "follow-counts": 0.0}, 100)], 0.0
    for i, (follows, lag) in enumerate(per_window, start=1):
        done += follows
        out.append(Sample(5.0 * i, {"public.follows": done, "follow-counts": done}, lag))
    return out


def test_rates_per_window_and_the_drain_of_the_follows_topic():
    ws = windows(_samples([(500, 900), (500, 400), (400, 0), (0, 0)]))
    assert [w["total"] for w in ws] == [100.0, 100.0, 80.0, 0.0]          # counted once, when counted
    assert [w["handled"] for w in ws] == [200.0, 200.0, 160.0, 0.0]
    s = summary(ws, 5.0)
    assert s["drain_s"] == 10.0                       # two windows ended with a backlog left
    assert s["follows_applied"] == 1400 and s["follows_per_s"] == round(1400 / 15, 1)
    assert s["peak_goodput_per_s"] == 100.0 and not s["collapsed"]


def test_a_stretch_below_30_percent_of_the_peak_with_a_backlog_left_is_a_collapse():
    slow = [(10, 5000)] * 7                           # 35 s at 2/s while 5,000 wait
    ws = windows(_samples([(1000, 6000)] + slow + [(1000, 0)]))
    s = summary(ws, 5.0)
    assert s["longest_below_30pct_s"] == 35.0 and s["collapsed"]


def test_a_worker_restart_resets_its_counter_without_a_negative_rate():
    samples = [Sample(0.0, {"follow-counts": 900.0}, 10), Sample(5.0, {"follow-counts": 50.0}, 5)]
    assert windows(samples)[0]["total"] == 0.0
