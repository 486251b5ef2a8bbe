"""A cgroup (v2) per stack server, so that the fault suite can cut one off the network.

On one machine every node listens at its own loopback address, but the connections it
opens leave from 127.0.0.1 (the kernel's source address for the loopback routes): a
packet filter on the node's address drops what others send it and leaves what it
sends. A broker cut that way still heartbeats to the controller and is never fenced;
a Cassandra node still reaches its peers. Sockets remember the cgroup of the process
that made them, and nftables matches on it (``socket cgroupv2``), so a server started
in a cgroup of its own can have everything it sends dropped.

Where no writable cgroup2 hierarchy is mounted under ``/sys/fs/cgroup`` (where nftables
looks the path up), servers start as before and a cut only drops what reaches the
node's ports (``tests/faults/injectors.py`` records which it did).
"""
from __future__ import annotations

import hashlib
import time
from pathlib import Path

# nftables resolves a `socket cgroupv2` path relative to this folder.
NFT_BASE = Path("/sys/fs/cgroup")


def _mount() -> Path | None:
    """The cgroup2 mount point under NFT_BASE (the base itself, or e.g. its unified/)."""
    try:
        lines = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if len(fields) >= 3 and fields[2] == "cgroup2":
            point = Path(fields[1])
            if point == NFT_BASE or NFT_BASE in point.parents:
                return point
    return None


def _group(stack_run: Path) -> str:
    # One group per stack folder: two checkouts' stacks on one machine never share one.
    return "feed-stack-" + hashlib.sha1(str(stack_run.resolve()).encode()).hexdigest()[:10]


def server_cgroup(stack_run: Path, name: str) -> Path | None:
    """The cgroup folder of server ``name`` of the stack whose pid files are in
    ``stack_run`` (None without a cgroup2 mount)."""
    mount = _mount()
    return None if mount is None else mount / _group(stack_run) / name


def prepare(stack_run: Path, name: str) -> Path | None:
    """Create the server's cgroup; None where that is not possible (no cgroup2, no
    permission): the server then starts where its parent is."""
    path = server_cgroup(stack_run, name)
    if path is None:
        return None
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return path if (path / "cgroup.procs").exists() else None


def enter(path: Path) -> None:
    """Move the calling process into ``path`` (run in the child before exec). A refusal
    leaves it where it is: the server matters more than the cut."""
    try:
        (path / "cgroup.procs").write_text("0")
    except OSError:
        pass


def nft_match(stack_run: Path, name: str) -> str | None:
    """The nftables expression matching every socket server ``name`` opened, or None when
    the server does not run in its cgroup (started without one, or gone)."""
    path = server_cgroup(stack_run, name)
    mount = _mount()
    if path is None or mount is None:
        return None
    try:
        if not (path / "cgroup.procs").read_text().split():
            return None
    except OSError:
        return None
    level = len(path.relative_to(mount).parts)
    return f'socket cgroupv2 level {level} "{path.relative_to(NFT_BASE)}"'


def remove(stack_run: Path, name: str, wait_s: float = 10.0) -> None:
    """Remove the server's cgroup and the stack's group once it is empty.

    A stopped server's main process is gone before its children are (Postgres's backends,
    a JVM's last threads): the folder is removed once ``cgroup.procs`` is empty, waiting
    up to ``wait_s``; past that whatever is left is killed (``cgroup.kill``) and the
    removal tried again, so ``make down`` leaves no group behind."""
    path = server_cgroup(stack_run, name)
    if path is None or not path.exists():
        _remove_group(path.parent if path is not None else None)
        return
    if not _emptied(path, wait_s):
        try:
            (path / "cgroup.kill").write_text("1")
        except OSError:
            pass
        _emptied(path, min(5.0, wait_s))
    try:
        _rmdir(path)
    except OSError:
        return
    _remove_group(path.parent)


def _emptied(path: Path, wait_s: float) -> bool:
    """Whether the group has no process left within ``wait_s``."""
    deadline = time.monotonic() + wait_s
    while _procs(path):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True


def _procs(path: Path) -> list[str]:
    try:
        return (path / "cgroup.procs").read_text().split()
    except OSError:
        return []


def _remove_group(group: Path | None) -> None:
    """The stack's group folder, if nothing is left in it."""
    if group is None:
        return
    try:
        _rmdir(group)
    except OSError:
        pass


def _rmdir(path: Path) -> None:
    """rmdir: in cgroupfs it removes a group that has no process and no child group."""
    path.rmdir()


def sweep() -> list[str]:
    """Remove every empty ``feed-stack-*`` group and server group under the mount: those
    of stacks whose checkout is gone (a CI clone, a worktree) are never stopped by their
    own ``down``. A group with a process in it is left alone. Returns what was removed."""
    mount = _mount()
    removed: list[str] = []
    if mount is None:
        return removed
    for group in sorted(mount.glob("feed-stack-*")):
        for server in sorted(p for p in group.iterdir() if p.is_dir()):
            if not _procs(server):
                try:
                    _rmdir(server)
                    removed.append(str(server.relative_to(mount)))
                except OSError:
                    pass
        try:
            _rmdir(group)
            removed.append(str(group.relative_to(mount)))
        except OSError:
            pass
    return removed
