"""The Cassandra node's heap and memtables (deploy/stack/layout.py, deploy/stack/cassandra.py):
one node gets room for large flushes; three nodes keep Cassandra's default; the memtable
space never exceeds half the heap, whatever the environment asks."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest

from deploy.stack import cassandra
from deploy.stack.layout import Layout

StackLayout = Callable[[int], Layout]


def _yaml(layout: Layout) -> dict[str, str]:
    pairs = (line.split(": ", 1) for line in cassandra._yaml(layout, 1).splitlines() if ": " in line)
    return {k: v for k, v in pairs if not k.startswith(" ")}


@pytest.fixture(autouse=True)
def _no_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FEED_CASSANDRA_HEAP_MB", raising=False)
    monkeypatch.delenv("FEED_CASSANDRA_MEMTABLE_MB", raising=False)


def test_one_node_flushes_large_memtables(tmp_path: Path, stack_layout: StackLayout) -> None:
    layout = stack_layout(1)
    assert (layout.cassandra_heap_mb, layout.cassandra_memtable_mb) == (2048, 1024)
    assert _yaml(layout)["memtable_heap_space"] == "1024MiB"
    argv = cassandra._argv(layout, 1, "java", _jars(tmp_path))
    assert "-Xmx2048m" in argv and "-XX:G1HeapRegionSize=16m" in argv


def test_small_heaps_keep_g1s_region_size(tmp_path: Path, stack_layout: StackLayout) -> None:
    argv = cassandra._argv(stack_layout(3), 1, "java", _jars(tmp_path))
    assert "-Xmx768m" in argv and not any("G1HeapRegionSize" in a for a in argv)


def test_three_nodes_keep_the_default_memtables(stack_layout: StackLayout) -> None:
    layout = stack_layout(3)
    assert (layout.cassandra_heap_mb, layout.cassandra_memtable_mb) == (768, None)
    assert "memtable_heap_space" not in _yaml(layout)


@pytest.mark.parametrize(("heap", "memtable", "expected"),
                         [("1024", None, 512), ("1024", "0", None), ("4096", "3000", 2048)])
def test_memtables_stay_within_half_the_heap(stack_layout: StackLayout, monkeypatch: pytest.MonkeyPatch,
                                             heap: str, memtable: str | None,
                                             expected: int | None) -> None:
    monkeypatch.setenv("FEED_CASSANDRA_HEAP_MB", heap)
    if memtable is not None:
        monkeypatch.setenv("FEED_CASSANDRA_MEMTABLE_MB", memtable)
    assert stack_layout(1).cassandra_memtable_mb == expected


@pytest.mark.parametrize("nodes", [1, 3])
def test_dropped_keyspaces_leave_no_snapshot(stack_layout: StackLayout, nodes: int) -> None:
    assert _yaml(stack_layout(nodes))["auto_snapshot"] == "false"


def _jars(tmp_path: Path) -> Path:
    lib = tmp_path / "lib"
    lib.mkdir(exist_ok=True)
    (lib / "jamm-0.4.0.jar").touch()
    return lib
