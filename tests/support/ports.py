"""Ports for a private stack that no other server or client of this run can hold.

Ports are picked below the kernel's ephemeral range (``ip_local_port_range``), which it
hands to outgoing connections: a port picked inside that range and closed again may be
the local end of some test's client connection a minute later, and the private stack's
server then cannot bind it. Each pick is bound once on every loopback address a
three-node stack uses, at the offsets the stack adds per node (Cassandra's JMX: +100).
Picked when a fixture runs, not when pytest collects the module.
"""
from __future__ import annotations

import random
import socket
from pathlib import Path

# Where the three-node stack's nodes listen (deploy/stack/layout.py) and the offsets it
# adds to a base port per node.
HOSTS = ("127.0.0.1", "127.0.0.2", "127.0.0.3")
OFFSETS = (0, 100, 200)
LOWEST = 20_000


def _ephemeral_floor() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def _bindable(port: int) -> bool:
    for host in HOSTS:
        for offset in OFFSETS:
            with socket.socket() as sock:
                try:
                    sock.bind((host, port + offset))
                except OSError:
                    return False
    return True


def free_ports(names: tuple[str, ...]) -> dict[str, str]:
    """``{name: port}``, each port (and its per-node offsets) free on every node address
    and outside the ephemeral range."""
    top = _ephemeral_floor() - max(OFFSETS) - 1
    rng = random.Random()
    chosen: dict[str, str] = {}
    taken: set[int] = set()
    for name in names:
        for _ in range(1000):
            port = rng.randrange(LOWEST, top)
            if any(abs(port - t) <= max(OFFSETS) for t in taken) or not _bindable(port):
                continue
            chosen[name] = str(port)
            taken.add(port)
            break
        else:
            raise RuntimeError(f"no free port below {top} for {name}")
    return chosen
