"""Liveness and readiness of a background process (the fan-out, the ranker, the CDC
relay), served beside its Prometheus metrics on one port (its metrics port, on
``FEED_METRICS_HOST``):

* ``GET /metrics``: prometheus_client's exposition, as ``start_http_server`` served it.
* ``GET /healthz``: 200 while the process's loops turn, else 503. Each asyncio loop it
  watches (``watch_loop``: a worker's event loop, its Kafka consumer thread's loop) is
  sent a probe every second from a thread of this module (``call_soon_threadsafe``); a
  probe left unanswered for ``stall_s`` fails the check. A blocking loop (the relay's)
  beats a ``Pulse`` instead; silent for ``stall_s`` (or longer than a pause it declared),
  it fails.
* ``GET /readyz``: 200 when every liveness and readiness check passes, else 503. The
  readiness checks are the process's own (a worker has joined its group, the relay
  streams its slot and reaches a broker).

Both answer JSON, ``{"status": "ok" | "failing", "checks": {name: {"ok": bool, "detail":
str}}}``, so a person (or ``deploy.services status``) sees what is wrong. The thresholds
are ``FEED_HEALTH_STALL_S`` (``MetricsSettings``).
"""
from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from wsgiref.simple_server import make_server

from prometheus_client import REGISTRY, CollectorRegistry, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer, _SilentHandler

log = logging.getLogger(__name__)

Clock = Callable[[], float]
# A check's answer: whether it passes, and what it saw (shown either way).
Answer = tuple[bool, str]
Check = Callable[[], Answer]

# Seconds between the probes sent to each watched loop.
PROBE_EVERY_S = 1.0


class LoopProbe:
    """Whether an asyncio loop, running in any thread, still runs its callbacks: ``probe``
    schedules a callback on it when none is outstanding; ``check`` fails once one has
    waited ``stall_s``. A closed loop fails at once."""

    def __init__(self, name: str, loop: asyncio.AbstractEventLoop, clock: Clock) -> None:
        self.name = name
        self.loop = loop
        self._clock = clock
        self._asked: float | None = None
        self._closed = False
        self.answers = 0

    def probe(self) -> None:
        if self._asked is not None or self._closed:
            return
        if self.loop.is_closed():
            self._closed = True
            return
        self._asked = self._clock()
        try:
            self.loop.call_soon_threadsafe(self._answered)
        except RuntimeError:  # closed between the test and the call
            self._closed = True

    def _answered(self) -> None:
        self._asked = None
        self.answers += 1

    def check(self, stall_s: float) -> Answer:
        if self._closed:
            return False, "its event loop is closed"
        waited = 0.0 if self._asked is None else self._clock() - self._asked
        if waited > stall_s:
            return False, f"has not run a callback for {waited:.1f} s (limit {stall_s:g} s)"
        return True, f"answering ({self.answers} probes answered)"


class Pulse:
    """The heartbeat of a loop that blocks instead of awaiting (the relay's): ``beat``
    on every turn, ``pausing(seconds)`` around a call that may block longer than the
    stall limit (a flush that waits for Kafka)."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._last = clock()
        self._allowed = 0.0
        self._doing = ""

    def beat(self) -> None:
        self._last = self._clock()
        self._allowed = 0.0
        self._doing = ""

    @contextmanager
    def pausing(self, seconds: float, doing: str) -> Iterator[None]:
        self.beat()
        self._allowed, self._doing = seconds, doing
        try:
            yield
        finally:
            self.beat()

    def check(self, stall_s: float) -> Answer:
        silent = self._clock() - self._last
        limit = max(stall_s, self._allowed)
        if silent > limit:
            doing = f" while {self._doing}" if self._doing else ""
            return False, f"silent for {silent:.1f} s{doing} (limit {limit:g} s)"
        return True, f"turning (last beat {silent:.1f} s ago{', ' + self._doing if self._doing else ''})"


class Health:
    """A process's liveness (its loops) and readiness (its own checks)."""

    def __init__(self, stall_s: float, clock: Clock = time.monotonic) -> None:
        if stall_s <= 0:
            raise ValueError("stall_s must be positive")
        self.stall_s = stall_s
        self.clock = clock
        self._probes: list[LoopProbe] = []
        self._pulses: dict[str, Pulse] = {}
        self._ready: dict[str, Check] = {}
        self._lock = threading.Lock()
        self._watchdog: threading.Thread | None = None

    # What is watched ------------------------------------------------------------------
    def watch_loop(self, name: str, loop: asyncio.AbstractEventLoop) -> None:
        """Probe ``loop`` (once per loop object: a second call for it changes nothing)."""
        with self._lock:
            if any(p.loop is loop for p in self._probes):
                return
            self._probes = [p for p in self._probes if p.name != name] + [
                LoopProbe(name, loop, self.clock)]

    def pulse(self, name: str, pulse: Pulse | None = None) -> Pulse:
        """The pulse watched as ``name``: ``pulse`` when given, else a new one."""
        with self._lock:
            if pulse is not None:
                self._pulses[name] = pulse
            elif name not in self._pulses:
                self._pulses[name] = Pulse(self.clock)
            return self._pulses[name]

    def readiness_check(self, name: str, check: Check) -> None:
        with self._lock:
            self._ready[name] = check

    # Answers ---------------------------------------------------------------------------
    def probe(self) -> None:
        """Send every watched loop its next probe (the watchdog thread's turn)."""
        for p in list(self._probes):
            p.probe()

    def liveness(self) -> dict[str, Answer]:
        answers = {p.name: p.check(self.stall_s) for p in list(self._probes)}
        answers.update({name: pulse.check(self.stall_s) for name, pulse in list(self._pulses.items())})
        if not answers:
            answers["process"] = (True, "serving (nothing to watch yet)")
        return answers

    def readiness(self) -> dict[str, Answer]:
        answers = self.liveness()
        with self._lock:
            checks = dict(self._ready)
        if not checks:
            answers["started"] = (False, "starting")
        for name, check in checks.items():
            try:
                answers[name] = check()
            except Exception as exc:  # noqa: BLE001 - a check that fails is an answer
                answers[name] = (False, f"check failed: {type(exc).__name__}: {exc}")
        return answers

    def start_watchdog(self, every_s: float = PROBE_EVERY_S) -> None:
        """A daemon thread probing the watched loops every ``every_s``."""
        if self._watchdog is not None:
            return

        def run() -> None:
            while True:
                self.probe()
                time.sleep(every_s)

        self._watchdog = threading.Thread(target=run, name="health-watchdog", daemon=True)
        self._watchdog.start()


def body(answers: dict[str, Answer]) -> tuple[bool, bytes]:
    ok = all(passed for passed, _ in answers.values())
    doc = {"status": "ok" if ok else "failing",
           "checks": {name: {"ok": passed, "detail": detail} for name, (passed, detail) in answers.items()}}
    return ok, json.dumps(doc).encode()


WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def wsgi_app(health: Health, registry: CollectorRegistry = REGISTRY) -> WsgiApp:
    """``/healthz`` and ``/readyz`` from ``health``; any other path is prometheus_client's
    metrics app (it serves every path, as ``start_http_server`` did)."""
    metrics = make_wsgi_app(registry)

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path in ("/healthz", "/readyz"):
            ok, payload = body(health.liveness() if path == "/healthz" else health.readiness())
            start_response("200 OK" if ok else "503 Service Unavailable",
                           [("Content-Type", "application/json"),
                            ("Content-Length", str(len(payload))), ("Cache-Control", "no-store")])
            return [payload]
        result: Iterable[bytes] = metrics(environ, start_response)
        return result

    return app


@dataclass
class Served:
    """The running server: where it listens (``port`` is the bound one, also for 0)."""

    host: str
    port: int
    server: ThreadingWSGIServer
    thread: threading.Thread

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def serve(health: Health, host: str, port: int, registry: CollectorRegistry = REGISTRY) -> Served:
    """Serve ``/metrics``, ``/healthz`` and ``/readyz`` on ``host:port`` from a daemon
    thread (prometheus_client's threading WSGI server, as ``start_http_server``), and
    start ``health``'s watchdog."""
    import socket

    class Server(ThreadingWSGIServer):
        """prometheus_client's server with the address family ``host`` needs."""

    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    Server.address_family = infos[0][0]
    httpd = make_server(host, port, wsgi_app(health, registry), Server, handler_class=_SilentHandler)
    thread = threading.Thread(target=httpd.serve_forever, name="health-http", daemon=True)
    thread.start()
    health.start_watchdog()
    bound = int(httpd.server_address[1])
    log.info("serving /metrics, /healthz and /readyz on %s:%d", host, bound)
    return Served(host, bound, httpd, thread)
