"""Where the project's processes listen when ``deploy.services`` runs several of a role
(the fan-out's and the ranker's consumer-group workers), for the launcher and the
stack's Prometheus alike.

Worker ``i`` of a role is ``<role>-<i>`` (the first keeps the bare name) and listens on
the role's metrics port + ``PORT_STRIDE`` × ``i``: the roles' default ports are
neighbours (the relay 9101, the fan-out 9102, the ranker 9103), so with a stride of one
the second fan-out would take the ranker's port.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .process import StackError

if TYPE_CHECKING:
    from services.shared.settings import Settings

ORDER = ("cdc", "fanout", "ranker", "api")
# The roles that run several processes (consumer-group workers).
SCALED = ("fanout", "ranker")
PORT_STRIDE = 10


def _count(raw: str | None, name: str) -> int:
    try:
        n = int(raw) if raw not in (None, "") else 1
    except ValueError:
        raise StackError(f"{name}={raw!r} is not a number of processes") from None
    if n < 1:
        raise StackError(f"{name}={n}: at least one process")
    return n


def worker_counts(environ: Mapping[str, str] | None = None) -> dict[str, int]:
    """How many processes of each scaled role: ``FEED_FANOUT_WORKERS``,
    ``FEED_RANKER_WORKERS`` (1 each when unset)."""
    environ = os.environ if environ is None else environ
    return {"fanout": _count(environ.get("FEED_FANOUT_WORKERS"), "FEED_FANOUT_WORKERS"),
            "ranker": _count(environ.get("FEED_RANKER_WORKERS"), "FEED_RANKER_WORKERS")}


@dataclass(frozen=True)
class Instance:
    """One process of a role: its index and its HTTP port (metrics and health; the API's
    own port for the API)."""

    role: str
    index: int
    port: int

    @property
    def name(self) -> str:
        return self.role if self.index == 0 else f"{self.role}-{self.index}"

    @property
    def port_env(self) -> dict[str, str]:
        """The variable that puts a scaled role's process on its port (none for the
        others: they keep their settings' port)."""
        return {f"FEED_{self.role.upper()}_METRICS_PORT": str(self.port)} if self.role in SCALED else {}


def base_port(s: "Settings", role: str) -> int:
    if role == "api":
        return s.api_port
    port: int = getattr(s, f"{role}_metrics_port")
    return port


def instances(s: "Settings", counts: Mapping[str, int]) -> list[Instance]:
    """Every process of every role for these counts, in start order; two processes on
    one port are refused, naming both."""
    out: list[Instance] = []
    for role in ORDER:
        n = counts.get(role, 1) if role in SCALED else 1
        base = base_port(s, role)
        out += [Instance(role, i, base + PORT_STRIDE * i if base else 0) for i in range(n)]
    taken: dict[int, str] = {}
    for inst in out:
        other = taken.setdefault(inst.port, inst.name) if inst.port else inst.name
        if other != inst.name:
            raise StackError(f"{inst.name} and {other} would both listen on port {inst.port}: "
                             f"set the roles' FEED_*_METRICS_PORT at least {PORT_STRIDE} x "
                             f"their workers apart")
    return out
