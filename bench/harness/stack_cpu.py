"""CPU seconds so far of the running stack and services, by component, as JSON: for a
run whose window is the processes' whole life (a fresh stack and ``make run``).

    .venv/bin/python -m bench.harness.stack_cpu

Stack processes are grouped as ``servers._component`` groups them (every Kafka process
is "kafka"); each service role (``deploy.services``' pid files: the supervisor, its
worker and the API's uvicorn workers, from /proc) is one component, whatever its number
of processes.
"""
from __future__ import annotations

import json
import sys

from bench.harness.servers import stack_pids
from bench.harness.wrk_load import tree_cpu_s
from deploy.services import recorded
from deploy.stack.layout import Layout


def cpu_by_component() -> dict[str, float]:
    out: dict[str, float] = {}
    for kind, pid in stack_pids():
        out[kind] = out.get(kind, 0.0) + tree_cpu_s(pid)
    for d in recorded(Layout.from_env()):
        pid = d.pid()
        if pid is not None:
            role = "services." + d.name.split("-", 1)[0]
            out[role] = out.get(role, 0.0) + tree_cpu_s(pid)
    return {name: round(seconds, 1) for name, seconds in sorted(out.items())}


if __name__ == "__main__":
    json.dump(cpu_by_component(), sys.stdout)
    print()
