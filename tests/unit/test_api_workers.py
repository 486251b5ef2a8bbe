"""How many API worker processes ``python -m services.api`` runs."""
from __future__ import annotations

import pytest

from services.api.__main__ import usable_cores, worker_count
from services.shared.settings import Settings


def test_by_default_the_api_runs_one_worker_per_usable_core(monkeypatch) -> None:
    monkeypatch.delenv("FEED_API_WORKERS", raising=False)
    assert Settings().api_workers == 0
    assert worker_count(Settings().api_workers, 2) == 2
    assert worker_count(Settings().api_workers, 8) == 8
    assert worker_count(Settings().api_workers, usable_cores()) == usable_cores()


def test_an_explicit_worker_count_wins_over_the_cores(monkeypatch) -> None:
    monkeypatch.setenv("FEED_API_WORKERS", "3")
    assert worker_count(Settings().api_workers, 2) == 3
    assert worker_count(1, 8) == 1


@pytest.mark.parametrize("cores", [None, 0])
def test_unknown_cores_mean_one_worker(cores: int | None) -> None:
    assert worker_count(0, cores) == 1


def test_usable_cores_are_at_least_one() -> None:
    cores = usable_cores()
    assert cores is not None and cores >= 1
