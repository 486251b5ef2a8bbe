"""Start and stop the project's own processes (api, cdc, fanout, ranker) beside the stack.

    python -m deploy.services start [name ...]   # default: every service that exists
    python -m deploy.services stop
    python -m deploy.services status             # each process, its readiness, its partitions

Each runs as ``python -m services.<name>`` under ``deploy.supervise`` (restarted when
it dies) with a pid file in ``<stack>/run`` and its log in ``<stack>/logs``, like the
stack's servers.

The fan-out and the ranker run ``FEED_FANOUT_WORKERS`` and ``FEED_RANKER_WORKERS``
processes (1 each by default; ``make run FANOUT_WORKERS=3 RANKER_WORKERS=2``), each under
a supervisor of its own, with its own pid file, log and port, all in the role's consumer
group, so Kafka (faust's assignor) spreads the topics' partitions over them. Worker ``i``
of a role is ``<role>-<i>`` (the first keeps the bare name: ``svc-fanout.pid``,
``svc-fanout.log``) and listens on the role's metrics port + ``PORT_STRIDE`` × ``i``
(the fan-out 9102, 9112, 9122, ...; the ranker 9103, 9113, ...): with a stride of one,
the second fan-out would take the ranker's port.

``start`` waits until each process answers 200 on its ``/readyz`` (the API: its stores;
a worker: it joined its group and opened its stores; the relay: it holds its slot and
reaches a broker) and stops everything it started if one of them fails; then it points
the stack's Prometheus at every worker and warns about a worker left without partitions
(fewer partitions than workers: ``FEED_KAFKA_PARTITIONS``, docs/capacity.md).
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from deploy.stack.layout import REPO, Layout
from deploy.stack.process import Daemon, StackError, spawn, stop, stop_many, wait_ready
from deploy.stack.workers import (ORDER, PORT_STRIDE, SCALED, Instance, base_port, instances,
                                  worker_counts)
from services.shared.settings import Settings, get_settings
from services.shared.settings.processes import across_processes

log = logging.getLogger("deploy.services")
# The services started here run beside the local stack, on the built-in development
# secrets unless FEED_JWT_SECRET / FEED_CURSOR_KEYS are set: the API refuses those without
# the development flag (services/shared/secret_policy.py). An explicit value is kept.
DEV_MODE_ENV = "FEED_DEV_MODE"


def _http_host(s: Settings, role: str) -> str:
    host: str = s.api_host if role == "api" else s.metrics_host
    return "127.0.0.1" if host in ("", "0.0.0.0", "::") else host


def probe_url(s: Settings, inst: Instance, path: str = "/readyz") -> str:
    return f"http://{_http_host(s, inst.role)}:{inst.port}{path}"


def available() -> list[str]:
    return [n for n in ORDER if (REPO / "services" / n / "__main__.py").is_file()]


def daemon(layout: Layout, name: str) -> Daemon:
    role = name.split("-", 1)[0]
    return Daemon(name=name, pid_file=layout.run / f"svc-{name}.pid",
                  log_file=layout.logs / f"svc-{name}.log", marker=f"services.{role}")


def recorded(layout: Layout) -> list[Daemon]:
    """Every service process with a pid file here (whatever counts started them), in
    start order."""
    names = [p.name[len("svc-"):-len(".pid")] for p in layout.run.glob("svc-*.pid")]
    known = [n for n in names if n.split("-", 1)[0] in ORDER]

    def order(name: str) -> tuple[int, int]:
        role, _, index = name.partition("-")
        return ORDER.index(role), int(index) if index.isdigit() else 0
    return [daemon(layout, n) for n in sorted(known, key=order)]


def worker_ports(s: Settings, layout: Layout | None = None) -> dict[str, list[int]]:
    """The metrics ports of every fan-out and ranker worker: as many as the environment's
    counts say, or more when more are recorded here (``layout``) as started."""
    counts = worker_counts()
    for d in recorded(layout) if layout is not None else []:
        role, _, index = d.name.partition("-")
        if role in SCALED:
            counts[role] = max(counts[role], (int(index) if index.isdigit() else 0) + 1)
    every = instances(s, counts)
    return {role: [i.port for i in every if i.role == role] for role in SCALED}


def _http_ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=2) as resp:
        return bool(resp.status == 200)


def readiness(url: str) -> tuple[int | None, dict[str, Any]]:
    """A process's ``/readyz`` answer: its status (None: no answer) and JSON body."""
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return resp.status, json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as exc:
        try:
            return exc.code, json.loads(exc.read() or b"{}")
        except ValueError:
            return exc.code, {}
    except (OSError, ValueError):
        return None, {}


def start(layout: Layout, names: list[str], counts: Mapping[str, int] | None = None) -> list[str]:
    """Start the processes of ``names`` (roles) that are not running, ``counts`` of the
    scaled roles (``worker_counts()`` when not given); their names."""
    settings = get_settings()
    for problem in across_processes(settings):
        log.warning("settings: %s", problem)
    counts = dict(worker_counts() if counts is None else counts)
    started: list[Daemon] = []
    try:
        for inst in instances(settings, counts):
            if inst.role not in names:
                continue
            d = daemon(layout, inst.name)
            if d.alive():
                continue
            env = {**layout.client_env(), DEV_MODE_ENV: os.environ.get(DEV_MODE_ENV, "true"),
                   # PYTHONFAULTHANDLER: a crash in a C extension logs every thread's stack.
                   "PYTHONFAULTHANDLER": "1", **inst.port_env}
            spawn(d, [sys.executable, "-m", "deploy.supervise", f"services.{inst.role}"],
                  env=env, cwd=REPO)
            started.append(d)
            wait_ready(d, f"service {inst.name}", partial(_http_ok, probe_url(settings, inst)),
                       timeout=90, log_file=d.log_file)
    except BaseException:
        for d in reversed(started):
            stop(d, grace=10)
        raise
    if started:
        _after_start(layout, settings, counts, names)
    return [d.name for d in started]


def _after_start(layout: Layout, settings: Settings, counts: Mapping[str, int],
                 names: list[str]) -> None:
    """Best effort: the stack's Prometheus scrapes every worker, and a worker without
    partitions is named."""
    try:
        from deploy.stack import prometheus
        if prometheus.refresh(layout, counts):
            log.info("prometheus: now scraping %s", ", ".join(
                f"{n} {role}" for role, n in counts.items()))
    except Exception as exc:  # noqa: BLE001 - the services run either way
        log.warning("prometheus: targets not refreshed (%s)", exc)
    if not any(counts.get(r, 1) > 1 and r in names for r in SCALED):
        return
    try:
        for line in idle_workers(settings, counts):
            log.warning("%s", line)
    except Exception as exc:  # noqa: BLE001
        log.warning("group assignment not read (%s)", exc)


def idle_workers(settings: Settings, counts: Mapping[str, int]) -> list[str]:
    """A line per started worker its group gives no partition (more workers than the
    partitions of its role's topics)."""
    from deploy.assignment import describe, worker_groups

    groups = dict(zip(SCALED, describe(settings, worker_groups(settings))))
    out = []
    for inst in instances(settings, counts):
        if inst.role not in SCALED or counts.get(inst.role, 1) < 2:
            continue
        member = groups[inst.role].by_address().get(f"{_http_host(settings, inst.role)}:{inst.port}")
        if member is not None and not member.partitions:
            out.append(f"{inst.name} holds no partitions: its role's topics have fewer partitions "
                       f"than its {counts[inst.role]} workers (FEED_KAFKA_PARTITIONS before the "
                       f"topics are made, docs/capacity.md 'Choosing partition counts')")
    return out


def stop_all(layout: Layout) -> list[str]:
    """Stop every service process recorded here, the API first and the relay last."""
    daemons = recorded(layout)
    stopped: list[str] = []
    for role in reversed(ORDER):
        stopped += stop_many([d for d in daemons if d.name.split("-", 1)[0] == role], grace=20)
    return stopped


def status_lines(layout: Layout, counts: Mapping[str, int] | None = None) -> list[str]:
    """A line per process (expected by the counts, or found running): pid, address,
    readiness; then, for the workers, the partitions their group gives each."""
    settings = get_settings()
    counts = dict(worker_counts() if counts is None else counts)
    expected = {i.name: i for i in instances(settings, counts)}
    for d in recorded(layout):  # running beyond the counts (started with others)
        if d.name not in expected:
            role, _, index = d.name.partition("-")
            i = int(index) if index.isdigit() else 0
            base = base_port(settings, role)
            expected[d.name] = Instance(role, i, base + PORT_STRIDE * i if base else 0)
    members: dict[str, Any] = {}
    try:
        from deploy.assignment import describe, worker_groups
        for group in describe(settings, worker_groups(settings), timeout_s=5):
            members.update(group.by_address())
    except Exception as exc:  # noqa: BLE001 - Kafka down: the rest still says something
        members = {}
        log.warning("group assignment not read (%s)", exc)
    out = []
    for name, inst in sorted(expected.items(), key=lambda kv: (ORDER.index(kv[1].role), kv[1].index)):
        d = daemon(layout, name)
        pid = d.pid()
        line = f"{name:<9} {'up   pid ' + str(pid) if pid else 'down':<16}"
        if inst.port:
            code, doc = readiness(probe_url(settings, inst)) if pid else (None, {})
            state = "ready" if code == 200 else ("not ready" if code else "no answer") if pid else ""
            line += f" :{inst.port:<6} {state:<10}"
            checks = doc.get("checks", {})
            failing = [f"{k}: {v.get('detail')}" for k, v in checks.items() if not v.get("ok")]
            if failing:
                line += " " + "; ".join(failing)
        line += f"  {d.log_file}"
        out.append(line)
        if inst.role in SCALED and pid:
            member = members.get(f"{_http_host(settings, inst.role)}:{inst.port}")
            if member is not None:
                from deploy.assignment import held
                out.append(f"          group: {held(member, settings.topic_prefix + '.')}")
            elif members or not pid:
                out.append("          group: not a member")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deploy.services", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("verb", choices=["start", "stop", "status"])
    parser.add_argument("names", nargs="*")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="services: %(message)s")
    layout = Layout.from_env()
    # This process's own clients (the group assignment read by status and after a
    # start) reach the stack as the services do: on three nodes, TLS and SCRAM.
    layout.use_as_default()
    try:
        if args.verb == "start":
            names = args.names or available()
            unknown = set(names) - set(available())
            if unknown:
                raise StackError(f"no such service: {', '.join(sorted(unknown))}")
            started = start(layout, names)
            print(f"services: started {', '.join(started) or 'nothing (already running)'}")
            if "api" in names:
                api = Instance("api", 0, get_settings().api_port)
                print(f"services: API at {probe_url(get_settings(), api, '')}")
        elif args.verb == "stop":
            stopped = stop_all(layout)
            print(f"services: stopped {', '.join(stopped) or 'nothing'}")
        else:
            print("\n".join(status_lines(layout)))
    except StackError as exc:
        print(exc.code, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
