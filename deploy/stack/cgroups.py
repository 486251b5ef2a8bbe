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


def remove(stack_run: Path, name: str) -> None:
    """Remove the server's (empty) cgroup and the stack's group once it is empty."""
    path = server_cgroup(stack_run, name)
    if path is None:
        return
    for folder in (path, path.parent):
        try:
            folder.rmdir()
        except OSError:
            return
