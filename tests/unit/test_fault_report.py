"""The fault suite's bookkeeping (tests/faults): lag recovery and the report row."""
from __future__ import annotations

from tests.faults.__main__ import LagWatch, row
from tests.faults.checker import Verdict


def test_lag_is_back_to_zero_at_the_first_zero_sample_after_the_lift():
    watch = LagWatch.__new__(LagWatch)
    watch.samples = [(100.0, 0), (101.0, 40), (102.0, None), (103.0, 5), (104.5, 0), (106.0, 0)]
    assert watch.zero_after(101.0) == 3.5
    assert watch.zero_after(107.0) is None
    assert watch.max_lag() == 40
    # Before the fault (t < 101) the lag peaked at 0, so the ceiling is 10: back at 103.
    assert watch.recovered_after(100.5, 101.0) == 2.0


def test_a_verdict_with_any_loss_or_drift_misses_and_the_row_says_so():
    assert Verdict().ok()
    for field in ("lost_writes", "feed_lost", "feed_duplicated", "wrongly_visible",
                  "follower_drift", "like_drift", "dlq_records", "cdc_unsent", "kafka_lost"):
        assert not Verdict(**{field: 1}).ok(), field
    result = {"scenario": "cassandra-kill", "faults": ["SIGKILL cassandra-3"],
              "verdict": Verdict(acked_writes=10, feed_lost=2).as_dict(), "ok": False,
              "non_2xx_during": 1, "requests_during": 200, "server_errors_other_than_503": 0,
              "freshness_max_during_s": 1.2, "lag_recovered_after_lift_s": 4.0,
              "lag_zero_after_load_s": 1.0}
    text = row(result)
    assert text.startswith("| cassandra-kill | 1 | 10 | 2 / 0 / 0 | not traced |")
    assert "0.5% failed" in text and text.rstrip().endswith("MISSED |")
    traced = {**result, "verdict": Verdict(cdc_unsent=1, kafka_lost=0).as_dict()}
    assert "| 1 / 0 |" in row(traced)
    assert Verdict(cdc_unsent=0, kafka_lost=0).ok()
