"""Command line of the stack manager. See ``deploy/README.md`` for what each verb does."""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from . import cassandra, cgroups, exporters, kafka, postgres, prometheus
from .layout import Layout
from .process import Daemon, StackError, stop


COMPONENTS = ("postgres", "kafka", "cassandra", "prometheus")


def cmd_up(layout: Layout, only: tuple[str, ...] = COMPONENTS) -> None:
    other = 3 if layout.nodes == 1 else 1
    other_layout = Layout.from_env(nodes=other)
    if any(r["pid"] for r in postgres.status(other_layout) + kafka.status(other_layout)
           + cassandra.status(other_layout)):
        raise StackError(f"the {other}-node stack is running; 'down' it before 'up --nodes {layout.nodes}'")
    layout.save_state()
    started: list[Daemon] = []
    t0 = time.monotonic()
    try:
        report = {}
        if "postgres" in only:
            report["postgres"] = postgres.up(layout)
            report["postgres-exporter"] = exporters.postgres_up(layout, started)
        if "kafka" in only:
            report["kafka"] = kafka.up(layout, started)
        if "cassandra" in only:
            report["cassandra"] = cassandra.up(layout, started)
        if "prometheus" in only:
            report["prometheus"] = prometheus.up(layout, started)
    except BaseException:
        # Leave nothing half-started: stop what this call started, then report.
        for d in reversed(started):
            stop(d, grace=10)
        raise
    for name, info in report.items():
        print(f"stack: {name}: {info['state']}"
              + (f" in {info['seconds']}s" if "seconds" in info else "")
              + (f" (http://{prometheus.address()})" if name == "prometheus" else ""), flush=True)
    print(f"stack: ready in {time.monotonic() - t0:.1f}s ({layout.nodes} node(s)); "
          f"logs in {layout.logs}", flush=True)


def _postgres_down(layout: Layout) -> bool:
    exporter = exporters.postgres_down(layout)  # before the server it scrapes
    return postgres.down(layout) or exporter


def cmd_down(layout: Layout) -> None:
    """The components of both stacks stop at once: each waits on its own processes
    (Cassandra's drain, Kafka's controlled shutdown, Postgres's fast stop), which one after
    another added up. Three nodes: 44 s before, 31 s at once, 12.6 s with Kafka's brokers
    stopped before its controllers (kafka.down)."""
    downs: list[Callable[[Layout], bool]] = [cassandra.down, kafka.down, _postgres_down]
    with ThreadPoolExecutor(max_workers=7) as pool:
        stopped = [pool.submit(down, Layout.from_env(nodes=nodes))
                   for nodes in (1, 3) for down in downs]
        stopped.append(pool.submit(prometheus.down, layout))
        any_stopped = any([f.result() for f in stopped])
    swept = cgroups.sweep()
    print(("stack: stopped" if any_stopped else "stack: nothing was running")
          + (f" ({len(swept)} empty cgroups of stopped stacks removed)" if swept else ""))


def cmd_status(layout: Layout, as_json: bool) -> int:
    rows = (postgres.status(layout) + exporters.status(layout) + kafka.status(layout)
            + cassandra.status(layout) + prometheus.status(layout))
    if as_json:
        print(json.dumps(rows, indent=2))
    else:
        for r in rows:
            state = f"up   pid {r['pid']:<7} rss {r['rss_mb']:>7.1f} MB" if r["pid"] else "down"
            print(f"{r['name']:<18} {r['address']:<18} {state}   {r['log']}")
    return 0 if all(r["pid"] for r in rows) else 3


def cmd_logs(layout: Layout, name: str | None, lines: int, follow: bool) -> None:
    files = sorted(layout.logs.glob(f"{name or '*'}*.log"))
    if not files:
        raise StackError(f"no logs matching {name!r} in {layout.logs}")
    argv = ["tail", f"-n{lines}"] + (["-F"] if follow else []) + [str(f) for f in files]
    subprocess.run(argv)


def cmd_reset(layout: Layout) -> None:
    cmd_down(layout)
    for nodes in (1, 3):
        postgres.wipe(Layout.from_env(nodes=nodes))
    shutil.rmtree(layout.root / "data", ignore_errors=True)
    shutil.rmtree(layout.logs, ignore_errors=True)
    shutil.rmtree(layout.run, ignore_errors=True)
    print(f"stack: data and logs removed (jars kept in {layout.lib})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deploy.stack", description=__doc__)
    parser.add_argument("verb", choices=["up", "down", "status", "logs", "reset", "env"])
    parser.add_argument("name", nargs="?", help="logs: a component, e.g. kafka-1")
    parser.add_argument("--nodes", type=int, choices=[1, 3], default=None,
                        help="1 (default) or 3 nodes each of Kafka and Cassandra")
    parser.add_argument("--json", action="store_true", help="status: machine-readable")
    parser.add_argument("--only", default=",".join(COMPONENTS),
                        help="up: comma-separated subset of " + ",".join(COMPONENTS))
    parser.add_argument("-n", "--lines", type=int, default=50)
    parser.add_argument("-f", "--follow", action="store_true")
    args = parser.parse_args(argv)
    layout = Layout.from_env(nodes=args.nodes)
    try:
        if args.verb == "up":
            only = tuple(c.strip() for c in args.only.split(",") if c.strip())
            unknown = set(only) - set(COMPONENTS)
            if unknown:
                raise StackError(f"--only: unknown component(s) {', '.join(sorted(unknown))}")
            cmd_up(layout, only)
        elif args.verb == "down":
            cmd_down(layout)
        elif args.verb == "status":
            return cmd_status(layout, args.json)
        elif args.verb == "logs":
            cmd_logs(layout, args.name, args.lines, args.follow)
        elif args.verb == "reset":
            cmd_reset(layout)
        elif args.verb == "env":
            for k, v in layout.client_env().items():
                print(f"export {k}={v}")
    except StackError as exc:
        print(exc.code, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
