"""py-spy over a worker for the window a benchmark measures (``--profile`` of
bench/fanout/rows.py and bench/fanout/history_drain.py), or over a server for one wrk run
(``--profile`` of bench/read/grid.py, bench/read/ab.py and bench/run)."""
from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

from bench.harness.wrk_load import run_wrk

ROOT = Path(__file__).resolve().parents[2]


def profiler(pid: int, out: Path) -> subprocess.Popen:
    """py-spy sampling ``pid`` (GIL samples, 200 Hz) until ``stop_profiler``, then writing
    ``out`` (raw format: ``frame;frame;... count`` per line, as bench/read/grid.py's
    profiles)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    spy = subprocess.Popen([str(ROOT / ".venv" / "bin" / "py-spy"), "record", "--pid", str(pid),
                            "--format", "raw", "--rate", "200", "--gil", "--output", str(out)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # attached before the measured work starts
    return spy


def stop_profiler(spy: subprocess.Popen | None) -> None:
    if spy is not None:
        spy.send_signal(signal.SIGINT)
        spy.wait(timeout=60)


def profile_wrk(url: str, pid: int, entries: list[tuple[str, str]], connections: int,
                duration_s: float, out: Path, *, rate: int = 200, gil: bool = True) -> None:
    """One more run of a load, not recorded, with py-spy sampling the server ``pid`` and its
    worker processes (its own CPU would skew a measured run): a collapsed-stack file at
    ``out``. ``gil``: sample only the thread holding the GIL (where the Python work goes,
    without threads waiting for it or idle in C counted as busy)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    spy = subprocess.Popen([str(ROOT / ".venv" / "bin" / "py-spy"), "record", "--pid", str(pid),
                            "--subprocesses", "--format", "raw", "--rate", str(rate),
                            *(["--gil"] if gil else []),
                            "--duration", str(int(duration_s)), "--output", str(out)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)  # py-spy attached before the load starts
    run_wrk(url, entries, connections, duration_s, pid, {})
    spy.wait(timeout=duration_s + 60)


def top_frames(collapsed: Path) -> list[tuple[float, str]]:
    """Leaf frames by their share of all samples (own time; py-spy's raw format is
    ``frame;frame;... count`` per line)."""
    counts: dict[str, int] = {}
    total = 0
    for line in collapsed.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not n.isdigit():
            continue
        total += int(n)
        leaf = stack.rsplit(";", 1)[-1]
        counts[leaf] = counts.get(leaf, 0) + int(n)
    ranked = sorted(counts.items(), key=lambda kv: -kv[1])
    return [(n / total, f) for f, n in ranked] if total else []
