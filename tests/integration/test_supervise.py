"""The service supervisor restarts a dying service and stops with SIGTERM."""
from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from deploy.stack.layout import REPO
from tests.support.waiting import wait_until


def _fake_service(tmp_path: Path, name: str, body: str) -> dict[str, str]:
    """A package ``services.<name>`` under ``tmp_path`` whose ``__main__`` is ``body``,
    and the environment that runs it ahead of the repository's own ``services``."""
    pkg = tmp_path / "services" / name
    pkg.mkdir(parents=True)
    (tmp_path / "services" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "__main__.py").write_text(body)
    return {"PYTHONPATH": f"{tmp_path}:{REPO}"}


def test_supervisor_restarts_a_crashed_child_and_forwards_sigterm(tmp_path: Path) -> None:
    marker = tmp_path / "starts"
    # Exits 75 twice (as a worker whose store is down), then keeps running.
    env = _fake_service(tmp_path, "flaky",
                        "import pathlib, sys, time\n"
                        f"p = pathlib.Path({str(marker)!r})\n"
                        "n = int(p.read_text()) + 1 if p.exists() else 1\n"
                        "p.write_text(str(n))\n"
                        "sys.exit(75) if n <= 2 else time.sleep(600)\n")
    proc = subprocess.Popen([sys.executable, "-m", "deploy.supervise", "services.flaky"],
                            cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    wait_until(lambda: marker.exists() and marker.read_text() == "3", timeout=30, interval=0.1,
               message="the third start of the flaky service")
    assert marker.read_text() == "3"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(15) == 128 + signal.SIGTERM
    assert proc.stderr.read().count("exited with 75") == 2


def test_supervisor_does_not_restart_a_child_its_stores_refused(tmp_path: Path) -> None:
    from deploy import supervise
    from services.shared.clients import preflight
    assert supervise.EXIT_CONFIG == preflight.EXIT_CONFIG
    marker = tmp_path / "starts"
    # Exits as the preflight does on a wrong password: once, and never again.
    env = _fake_service(tmp_path, "refused",
                        "import pathlib, sys\n"
                        f"p = pathlib.Path({str(marker)!r})\n"
                        "p.write_text(str(int(p.read_text()) + 1 if p.exists() else 1))\n"
                        f"sys.exit({preflight.EXIT_CONFIG})\n")
    done = subprocess.run([sys.executable, "-m", "deploy.supervise", "services.refused"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == preflight.EXIT_CONFIG
    assert marker.read_text() == "1"
    assert "not restarting" in done.stderr
