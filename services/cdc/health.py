"""The relay's liveness and readiness (served by services/shared/health.py on
``FEED_CDC_METRICS_PORT``):

* liveness: the relay's loop beats a ``Pulse`` every turn (at most every 50 ms while
  streaming, every record of a snapshot, before and after each back-off); a flush that
  may wait for Kafka declares its own limit.
* readiness, ``slot``: the session holds its replication slot, snapshotting it for the
  first time or streaming it (not connecting, not waiting out a back-off after an error);
  ``kafka``: the producer's last statistics (every 5 s, librdkafka's ``stats_cb``,
  services/shared/stores/store_health.py) show a broker connected, and are not older than
  the stall limit.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from services.shared.health import Answer, Health, Pulse
from services.shared.stores import store_health

# What the session is doing.
STARTING, CONNECTING, SNAPSHOT, STREAMING, BACKING_OFF = (
    "starting", "connecting", "snapshot", "streaming", "backing off")
HOLDS_SLOT = (SNAPSHOT, STREAMING)


@dataclass
class RelayStatus:
    """Where the relay's session is, written by ``Relay`` (its thread only)."""

    pulse: Pulse = field(default_factory=lambda: Pulse(time.monotonic))
    phase: str = STARTING
    detail: str = ""

    def enter(self, phase: str, detail: str = "") -> None:
        self.phase, self.detail = phase, detail
        self.pulse.beat()

    def slot_check(self) -> Answer:
        text = self.phase + (f": {self.detail}" if self.detail else "")
        return self.phase in HOLDS_SLOT, text


def kafka_check(stall_s: float, clock: Callable[[], float] = time.monotonic,
                last: Callable[[], tuple[float, dict[str, int]] | None] = store_health.last_kafka_states
                ) -> Answer:
    seen = last()
    if seen is None:
        return False, "no statistics from the producer yet"
    at, counts = seen
    age = clock() - at
    if age > stall_s:
        return False, f"no statistics from the producer for {age:.0f} s"
    if counts.get("up", 0) < 1:
        return False, f"no broker connected ({counts.get('down', 0)} failing)"
    return True, f"{counts['up']} brokers connected, {counts.get('down', 0)} failing"


def relay_health(status: RelayStatus, stall_s: float) -> Health:
    health = Health(stall_s)
    health.pulse("relay loop", status.pulse)
    health.readiness_check("slot", status.slot_check)
    health.readiness_check("kafka", lambda: kafka_check(stall_s))
    return health
