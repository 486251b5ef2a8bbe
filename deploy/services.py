"""Start and stop the project's own processes (api, cdc, fanout, ranker) beside the stack.

    python -m deploy.services start [name ...]   # default: every service that exists
    python -m deploy.services stop
    python -m deploy.services status

Each runs as ``python -m services.<name>`` under ``deploy.supervise`` (restarted when
it dies) with a pid file in ``<stack>/run`` and its log
in ``<stack>/logs``, like the stack's servers. ``start`` waits until each one answers on
its HTTP port (the API's /readyz, the workers' /metrics) and stops everything it started
if one of them fails.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import urllib.request
from functools import partial

from deploy.stack.layout import REPO, Layout
from deploy.stack.process import Daemon, StackError, spawn, stop, wait_ready
from services.shared.settings import get_settings
from services.shared.settings.processes import across_processes

log = logging.getLogger("deploy.services")
ORDER = ("cdc", "fanout", "ranker", "api")
# The services started here run beside the local stack, on the built-in development
# secrets unless FEED_JWT_SECRET / FEED_CURSOR_KEYS are set: the API refuses those without
# the development flag (services/shared/secret_policy.py). An explicit value is kept.
DEV_MODE_ENV = "FEED_DEV_MODE"


def _probe_url(name: str) -> str:
    s = get_settings()
    if name == "api":
        return f"http://{getattr(s, 'api_host', '127.0.0.1')}:{getattr(s, 'api_port', 8080)}/readyz"
    port = getattr(s, f"{name}_metrics_port", {"cdc": 9101, "fanout": 9102, "ranker": 9103}[name])
    return f"http://127.0.0.1:{port}/metrics"


def available() -> list[str]:
    return [n for n in ORDER if (REPO / "services" / n / "__main__.py").is_file()]


def daemon(layout: Layout, name: str) -> Daemon:
    return Daemon(name=name, pid_file=layout.run / f"svc-{name}.pid",
                  log_file=layout.logs / f"svc-{name}.log", marker=f"services.{name}")


def _http_ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=2) as resp:
        return bool(resp.status == 200)


def _serving(name: str) -> bool:
    """The readiness probe of one service (its address is read again on every try)."""
    return _http_ok(_probe_url(name))


def start(layout: Layout, names: list[str]) -> list[str]:
    for problem in across_processes(get_settings()):
        log.warning("settings: %s", problem)
    started: list[Daemon] = []
    try:
        for name in names:
            d = daemon(layout, name)
            if d.alive():
                continue
            spawn(d, [sys.executable, "-m", "deploy.supervise", f"services.{name}"],
                  # PYTHONFAULTHANDLER: a crash in a C extension logs every thread's stack.
                  env={**layout.client_env(), DEV_MODE_ENV: os.environ.get(DEV_MODE_ENV, "true"),
                       "PYTHONFAULTHANDLER": "1"},
                  cwd=REPO)
            started.append(d)
            wait_ready(d, f"service {name}", partial(_serving, name),
                       timeout=90, log_file=d.log_file)
    except BaseException:
        for d in reversed(started):
            stop(d, grace=10)
        raise
    return [d.name for d in started]


def stop_all(layout: Layout) -> list[str]:
    return [n for n in reversed(ORDER) if stop(daemon(layout, n), grace=20)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deploy.services", description=__doc__)
    parser.add_argument("verb", choices=["start", "stop", "status"])
    parser.add_argument("names", nargs="*")
    args = parser.parse_args(argv)
    layout = Layout.from_env()
    try:
        if args.verb == "start":
            names = args.names or available()
            unknown = set(names) - set(available())
            if unknown:
                raise StackError(f"no such service: {', '.join(sorted(unknown))}")
            started = start(layout, names)
            print(f"services: started {', '.join(started) or 'nothing (already running)'}")
            if "api" in names:
                print(f"services: API at {_probe_url('api').rsplit('/', 1)[0]}")
        elif args.verb == "stop":
            stopped = stop_all(layout)
            print(f"services: stopped {', '.join(stopped) or 'nothing'}")
        else:
            for name in ORDER:
                d = daemon(layout, name)
                pid = d.pid()
                print(f"{name:<8} {'up   pid ' + str(pid) if pid else 'down':<16} {d.log_file}")
    except StackError as exc:
        print(exc.code, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
