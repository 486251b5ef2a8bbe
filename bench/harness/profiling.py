"""py-spy over a worker for the window a benchmark measures (``--profile`` of
bench/fanout/rows.py and bench/fanout/history_drain.py)."""
from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

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
