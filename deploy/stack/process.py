"""Starting, watching and stopping the stack's own server processes.

Each server is one process with a pid file under ``<stack>/run``; ``down`` signals only
pids recorded there whose command line still names this stack's folder, so it never
touches a process it did not start (or a recycled pid).
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NotRequired, TypedDict

from . import cgroups


class StatusRow(TypedDict):
    """One line of ``stack status`` (printed, or as JSON with ``--json``)."""

    name: str
    pid: int | None
    address: str
    ready: bool
    rss_mb: float
    log: str


class UpReport(TypedDict):
    """What each component's ``up`` did, for ``stack up``'s summary lines."""

    state: str  # "started" or "already running"
    seconds: NotRequired[float]


class StackError(SystemExit):
    """A failure with a message meant for the person at the terminal."""

    def __init__(self, message: str) -> None:
        super().__init__(f"stack: {message}")


@dataclass(frozen=True)
class Daemon:
    name: str  # e.g. "kafka-1"
    pid_file: Path
    log_file: Path
    marker: str  # a string that must appear in the process's command line

    def pid(self) -> int | None:
        try:
            pid = int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None
        return pid if _cmdline_has(pid, self.marker) else None

    def alive(self) -> bool:
        return self.pid() is not None


def _cmdline_has(pid: int, marker: str) -> bool:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return marker.encode() in raw


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def who_listens(port: int) -> str:
    """A short description of the process listening on ``port``, for error messages."""
    try:
        out = subprocess.run(
            ["ss", "-Hltnp", f"sport = :{port}"], capture_output=True, text=True, timeout=5
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown process"
    return out.splitlines()[0] if out else "unknown process"


EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def in_ephemeral_range(port: int, range_file: Path = EPHEMERAL_RANGE) -> bool:
    """Whether the kernel may give ``port`` to an outgoing connection. A server listening
    there cannot always start again: while it is down, a client reconnecting to it may be
    given that very port as its own and connect to itself (a TCP self-connect), holding
    the port ("Address already in use"): Postgres on 55432 did so once in a 50 s outage."""
    try:
        low, high = (int(v) for v in range_file.read_text().split())
    except (OSError, ValueError):
        return False
    return low <= port <= high


def ensure_ports_free(owner: str, addresses: list[tuple[str, int]]) -> None:
    for host, port in addresses:
        if in_ephemeral_range(port):
            print(f"stack: {owner}: port {port} is in the kernel's range for outgoing connections "
                  f"({EPHEMERAL_RANGE}): a client reconnecting while {owner} is down may take it, "
                  f"and {owner} then cannot start again; choose a port below that range")
        if port_open(host, port):
            raise StackError(
                f"{owner}: port {host}:{port} is already taken by {who_listens(port)}; "
                f"stop that process or choose another port (see README, 'Ports')"
            )


def spawn(daemon: Daemon, argv: list[str], env: dict[str, str] | None = None,
          cwd: Path | None = None) -> int:
    daemon.log_file.parent.mkdir(parents=True, exist_ok=True)
    daemon.pid_file.parent.mkdir(parents=True, exist_ok=True)
    with open(daemon.log_file, "ab") as log:
        log.write(f"\n===== {time.strftime('%Y-%m-%dT%H:%M:%S')} starting {daemon.name}\n".encode())
        log.flush()
        # Its own cgroup, so that a fault can cut it off the network (cgroups.py).
        group = cgroups.prepare(daemon.pid_file.parent, daemon.name)
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            cwd=cwd, env={**os.environ, **(env or {})}, start_new_session=True,
            preexec_fn=None if group is None else (lambda: cgroups.enter(group)),
        )
    daemon.pid_file.write_text(str(proc.pid))
    # The launcher may need a moment before /proc shows its final command line.
    deadline = time.monotonic() + 10
    while not daemon.alive() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    return proc.pid


def tail(path: Path, lines: int = 20) -> str:
    try:
        data = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(data[-lines:])


def wait_ready(daemon: Daemon | None, what: str, probe: Callable[[], bool],
               timeout: float, log_file: Path) -> float:
    """Poll ``probe`` until it is true; fail at once if the daemon dies meanwhile.

    Returns the seconds waited. Readiness is a real request (a query, a metadata call),
    never a fixed sleep.
    """
    start = time.monotonic()
    not_ready = "the probe answered not ready"
    last = not_ready
    while True:
        if daemon is not None and not daemon.alive():
            raise StackError(
                f"{what} exited during start; see {log_file}\n--- last lines ---\n"
                f"{tail(log_file)}"
            )
        try:
            if probe():
                return time.monotonic() - start
            last = not_ready
        except Exception as exc:  # noqa: BLE001 - a probe failing just means "not ready yet"
            last = f"the probe failed: {type(exc).__name__}: {str(exc)[:300]}"
        if time.monotonic() - start > timeout:
            raise StackError(
                f"{what} not ready after {timeout:.0f}s ({last}); see {log_file}\n"
                f"--- last lines ---\n{tail(log_file)}"
            )
        time.sleep(0.5)


def stop(daemon: Daemon, grace: float = 30.0) -> bool:
    """SIGTERM, then SIGKILL after ``grace`` seconds. True if something was stopped."""
    return bool(stop_many([daemon], grace))


def stop_many(daemons: list[Daemon], grace: float = 30.0) -> list[str]:
    """Signal every daemon at once, then wait: brokers of a KRaft quorum stopped one by
    one hang in controlled shutdown once the quorum is gone. Returns the names stopped."""
    live = {}
    for d in daemons:
        pid = d.pid()
        if pid is None:
            d.pid_file.unlink(missing_ok=True)
            cgroups.remove(d.pid_file.parent, d.name)
            continue
        live[d] = pid
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(_cmdline_has(p, d.marker) for d, p in live.items()):
        time.sleep(0.2)
    for d, pid in live.items():
        if _cmdline_has(pid, d.marker):
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            while _cmdline_has(pid, d.marker):
                time.sleep(0.1)
        d.pid_file.unlink(missing_ok=True)
        cgroups.remove(d.pid_file.parent, d.name)
    return [d.name for d in live]


def status_row(daemon: Daemon, address: str) -> StatusRow:
    """One line of ``stack status`` for a server the manager runs itself."""
    pid = daemon.pid()
    return {"name": daemon.name, "pid": pid, "address": address, "ready": pid is not None,
            "rss_mb": round(rss_mb(pid), 1) if pid else 0, "log": str(daemon.log_file)}


def rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def run_checked(argv: list[str], what: str, log_file: Path,
                **kw: Any) -> subprocess.CompletedProcess[str]:
    log_file.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(argv, capture_output=True, text=True, **kw)
    with open(log_file, "a") as log:
        log.write(f"$ {' '.join(argv)}\n{proc.stdout}{proc.stderr}\n")
    if proc.returncode != 0:
        raise StackError(f"{what} failed (exit {proc.returncode}); see {log_file}\n"
                         f"{(proc.stderr or proc.stdout).strip()[-2000:]}")
    return proc
