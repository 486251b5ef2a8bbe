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


@pytest.fixture
def cgroupfs(tree: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """rmdir as cgroupfs does it: a group goes with its interface files unless a process
    or a child group is in it."""
    def rmdir(path: Path) -> None:
        procs = path / "cgroup.procs"
        if (procs.exists() and procs.read_text().split()) or any(p.is_dir() for p in path.iterdir()):
            raise OSError(16, "Device or resource busy")
        for f in path.iterdir():
            f.unlink()
        path.rmdir()
    monkeypatch.setattr(cgroups, "_rmdir", rmdir)
    return tree


def _server(run: Path, name: str, procs: str) -> Path:
    folder = cgroups.server_cgroup(run, name)
    assert folder is not None
    folder.mkdir(parents=True)
    (folder / "cgroup.procs").write_text(procs)
    (folder / "cgroup.kill").write_text("")
    return folder


def test_a_stopped_servers_group_goes_once_its_last_process_is_gone(cgroupfs: Path) -> None:
    import threading

    run = Path("/stack/run/1n")
    folder = _server(run, "postgres", "4242\n4243\n")   # a backend still exiting
    threading.Timer(0.3, lambda: (folder / "cgroup.procs").write_text("")).start()
    cgroups.remove(run, "postgres", wait_s=5)
    assert not folder.exists() and not folder.parent.exists()


def test_what_outlives_the_wait_is_killed(cgroupfs: Path) -> None:
    run = Path("/stack/run/1n")
    folder = _server(run, "kafka-1", "4242\n")
    cgroups.remove(run, "kafka-1", wait_s=0.2)
    assert (folder / "cgroup.kill").read_text() == "1"


def test_sweep_removes_empty_groups_of_gone_stacks_and_leaves_live_ones(cgroupfs: Path) -> None:
    gone = _server(Path("/gone/.stack/run/3n"), "cassandra-1", "")
    live = _server(Path("/here/.stack/run/1n"), "cassandra-1", "777\n")
    removed = cgroups.sweep()
    assert not gone.parent.exists()
    assert live.exists()
    assert f"{gone.parent.name}/cassandra-1" in removed and gone.parent.name in removed
