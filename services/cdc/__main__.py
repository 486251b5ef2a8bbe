"""``python -m services.cdc``: run the CDC relay until SIGTERM/SIGINT."""
from __future__ import annotations

import logging
import signal
import sys
import threading

from services.shared.clients.preflight import preflight
from services.shared.health import serve
from services.shared.settings import CdcProcess, load

from .column_rendering import UnsupportedColumnType
from .health import RelayStatus, relay_health
from .relay import Relay
from .slot import SlotInUse


def main() -> int:
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    settings = load(CdcProcess)
    # A wrong password or TLS setting ends the relay here, in one line (status 78), instead
    # of a reconnect loop against it; a store not up yet is left to the relay's back-off.
    preflight(settings, ("postgres", "kafka"))
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    status = RelayStatus()
    if settings.cdc_metrics_port:
        # /metrics, /healthz (the relay's loop turns) and /readyz (it holds its slot and
        # reaches a broker): services/cdc/health.py.
        serve(relay_health(status, settings.health_stall_s), settings.metrics_host,
              settings.cdc_metrics_port)
    try:
        Relay(settings, stop, status=status).run()
    except SlotInUse as exc:
        logging.error("%s", exc)
        return 2
    except UnsupportedColumnType as exc:
        logging.error("unsupported column type, relay stopped before producing it: %s", exc)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
