"""``die_with``: a child dies with its parent, however the parent dies (SIGKILL here),
as the API's uvicorn workers do with their master."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from services.shared.parent_death import die_with

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux's")

# The parent: starts a child that calls die_with(parent), prints the child's pid, waits.
PARENT = """
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c",
    "import os, sys, time; from services.shared.parent_death import die_with; "
    "assert die_with(int(sys.argv[1])); print('armed', flush=True); time.sleep(120)",
    str(os.getpid())], stdout=subprocess.PIPE, text=True)
assert child.stdout.readline().strip() == "armed"
print(child.pid, flush=True)
time.sleep(120)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_child_is_killed_when_its_parent_is_killed() -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True,
                              cwd=os.getcwd())
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        assert _alive(child)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(timeout=10)
        deadline = time.monotonic() + 10
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(child)
    finally:
        parent.kill()


def test_a_parent_already_gone_kills_the_caller_at_once() -> None:
    code = ("import signal; from services.shared.parent_death import die_with; "
            "die_with(1, signal.SIGTERM); import time; time.sleep(30)")
    done = subprocess.run([sys.executable, "-c", code], timeout=20)
    assert done.returncode == -signal.SIGTERM
