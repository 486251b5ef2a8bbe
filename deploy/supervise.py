"""Run one service module and restart it when it dies, like a tiny process supervisor.

    python -m deploy.supervise services.fanout

The workers stop on purpose (exit 75) when a store stays unavailable, without committing
their offsets, expecting to be restarted; a crash is restarted too. Restarts back off
exponentially (1 s doubling to 30 s, reset after a minute of healthy running). SIGTERM or
SIGINT is passed to the child, and then the supervisor exits with it. A child that ends
with EX_CONFIG (78, a store refused its credentials or certificates at start,
services/shared/clients/preflight.py) is not restarted: the same settings would be
refused again, and retrying a wrong password only locks the account.
"""
from __future__ import annotations

import signal
import subprocess
import sys
import time
from types import FrameType

BACKOFF_START_S = 1.0
BACKOFF_MAX_S = 30.0
HEALTHY_AFTER_S = 60.0  # a child that ran this long resets the back-off
# services/shared/clients/preflight.py EXIT_CONFIG, not imported: the supervisor imports
# nothing of the services it runs (tests/integration/test_supervise.py checks both).
EXIT_CONFIG = 78


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not argv[0].startswith("services."):
        print("usage: python -m deploy.supervise services.<name>", file=sys.stderr)
        return 2
    module = argv[0]
    stopping = False
    child: subprocess.Popen[bytes] | None = None

    def forward(signum: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True
        if child and child.poll() is None:
            child.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    backoff = BACKOFF_START_S
    while True:
        started = time.monotonic()
        child = subprocess.Popen([sys.executable, "-m", module])
        code = child.wait()
        if code < 0:
            code = 128 - code  # killed by a signal: the shell's convention (SIGTERM -> 143)
        if stopping:
            return code
        if code == EXIT_CONFIG:
            print(f"supervise: {module} refused its configuration (exit {code}); not restarting it",
                  file=sys.stderr, flush=True)
            return code
        ran = time.monotonic() - started
        backoff = BACKOFF_START_S if ran > HEALTHY_AFTER_S else min(BACKOFF_MAX_S, backoff * 2)
        print(f"supervise: {module} exited with {code} after {ran:.0f}s; restarting in {backoff:.0f}s",
              file=sys.stderr, flush=True)
        deadline = time.monotonic() + backoff
        while time.monotonic() < deadline and not stopping:
            time.sleep(0.2)
        if stopping:
            return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
