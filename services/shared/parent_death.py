"""A child process that must not outlive the process that started it.

The API runs several uvicorn workers under one master process (services/api/__main__.py).
If the master is killed outright (SIGKILL, the OOM killer), its workers are left running:
they keep serving on the listening socket they inherited, no one restarts or stops them,
and the master's supervisor cannot start a new master on that port. ``die_with`` asks
the kernel (Linux ``prctl(PR_SET_PDEATHSIG)``) to kill this process when its parent
exits, so a dead master takes its workers with it and its supervisor starts the whole
API again.
"""
from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1


def die_with(parent_pid: int, sig: int = signal.SIGKILL) -> bool:
    """Have ``sig`` sent to this process when its parent exits; if ``parent_pid`` is no
    longer its parent (it died before this call), the signal is sent now. False where
    the platform cannot do it (not Linux, or the call failed): nothing changes then."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):
        return False
    if os.getppid() != parent_pid:
        os.kill(os.getpid(), sig)
    return True
