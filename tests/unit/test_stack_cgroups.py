"""deploy/stack/cgroups.py: the nftables match for a server's own sockets, on a fake
cgroup2 tree (the real one is used by the fault suite's cuts)."""
from __future__ import annotations

from pathlib import Path

import pytest

from deploy.stack import cgroups


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    base = tmp_path / "sys-fs-cgroup"
    mount = base / "unified"
    mount.mkdir(parents=True)
    monkeypatch.setattr(cgroups, "NFT_BASE", base)
    monkeypatch.setattr(cgroups, "_mount", lambda: mount)
    return mount


def test_a_running_server_is_matched_by_its_level_and_its_path_below_the_base(tree: Path) -> None:
    run = Path("/stack/run/3n")
    folder = cgroups.server_cgroup(run, "kafka-3")
    assert folder is not None and folder.parent.parent == tree
    folder.mkdir(parents=True)
    (folder / "cgroup.procs").write_text("4242\n")
    group = folder.parent.name
    assert cgroups.nft_match(run, "kafka-3") == f'socket cgroupv2 level 2 "unified/{group}/kafka-3"'


def test_a_server_without_processes_in_its_cgroup_is_not_matched(tree: Path) -> None:
    run = Path("/stack/run/3n")
    folder = cgroups.server_cgroup(run, "kafka-3")
    assert folder is not None
    assert cgroups.nft_match(run, "kafka-3") is None  # never created: started without one
    folder.mkdir(parents=True)
    (folder / "cgroup.procs").write_text("")
    assert cgroups.nft_match(run, "kafka-3") is None  # the server is gone


def test_two_stack_folders_never_share_a_group(tree: Path) -> None:
    one = cgroups.server_cgroup(Path("/a/.stack/run/3n"), "kafka-1")
    other = cgroups.server_cgroup(Path("/b/.stack/run/3n"), "kafka-1")
    assert one is not None and other is not None and one.parent != other.parent


def test_a_folder_that_is_no_cgroup_is_not_used(tree: Path) -> None:
    # mkdir in a cgroup2 tree creates cgroup.procs; a plain folder does not.
    assert cgroups.prepare(Path("/stack/run/1n"), "cassandra-1") is None


def test_without_a_cgroup2_mount_nothing_is_prepared(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cgroups, "_mount", lambda: None)
    assert cgroups.prepare(Path("/stack/run/1n"), "kafka-1") is None
    assert cgroups.nft_match(Path("/stack/run/1n"), "kafka-1") is None
