"""Every benchmark module imports: a helper moved in tests/ once left bench/fanout/rows.py and
two others failing at their first line, unnoticed because nothing imported them."""
from __future__ import annotations

import importlib
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
MODULES = sorted(p.stem for p in BENCH.glob("*.py") if p.stem != "__init__")


@pytest.mark.parametrize("name", MODULES)
def test_a_bench_module_imports(name: str) -> None:
    importlib.import_module(f"bench.{name}")
