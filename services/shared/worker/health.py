"""A worker's liveness and readiness (served by services/shared/health.py on its metrics
port), from what faust tells it:

* liveness: the worker's event loop (the agents) and its Kafka consumer thread's own
  loop (faust runs aiokafka in a thread) both answer probes;
* readiness: the stores its agents open once are open (``OpenedOnce``), and its consumer
  is a member of its group with an assignment: faust's ``on_partitions_assigned`` came,
  and no rebalance (``on_partitions_revoked`` without an assignment after it) has lasted
  past ``FEED_HEALTH_STALL_S``. A member with no partitions (more workers than the
  topics' partitions) is ready and says so: it takes over when another one leaves.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import faust

from services.shared.health import Answer, Health

log = logging.getLogger(__name__)


@dataclass
class GroupMembership:
    """What this worker's consumer holds of its group, as faust's rebalance signals say."""

    clock: Callable[[], float]
    assignments: int = 0                       # assignments received
    partitions: frozenset[tuple[str, int]] = frozenset()
    generation: int | None = None
    rebalancing_since: float | None = None
    topics: set[str] = field(default_factory=set)

    def revoked(self) -> None:
        if self.rebalancing_since is None:
            self.rebalancing_since = self.clock()

    def assigned(self, tps: Iterable[tuple[str, int]], generation: int | None) -> None:
        self.partitions = frozenset(tps)
        self.topics = {topic for topic, _ in self.partitions}
        self.generation = generation
        self.assignments += 1
        self.rebalancing_since = None

    def check(self, stall_s: float) -> Answer:
        if self.assignments == 0:
            since = self.rebalancing_since
            waited = "" if since is None else f" (joining for {self.clock() - since:.0f} s)"
            return False, f"not a member of its group yet{waited}"
        if self.rebalancing_since is not None:
            lasted = self.clock() - self.rebalancing_since
            if lasted > stall_s:
                return False, f"rebalancing for {lasted:.0f} s (limit {stall_s:g} s)"
            return True, f"rebalancing for {lasted:.0f} s; held {self._held()} before"
        return True, f"{self._held()} (generation {self.generation})"

    def _held(self) -> str:
        if not self.partitions:
            return "no partitions (the group has more members than the topics have partitions)"
        return f"{len(self.partitions)} partitions of {len(self.topics)} topics"


def attach(app: faust.App, health: Health, stores_open: Callable[[], Answer] | None = None
           ) -> GroupMembership:
    """Watch ``app``'s loops and group membership in ``health`` (before the worker
    starts: the signals are connected here, the loops registered when they run)."""
    membership = GroupMembership(health.clock)

    async def watch_event_loop() -> None:
        health.watch_loop("event loop", asyncio.get_running_loop())

    # faust's signals call a receiver as (sender, *args, signal=..., **kwargs).
    async def revoked(sender: Any, /, *args: Any, signal: Any = None, **_: Any) -> None:
        membership.revoked()

    async def assigned(sender: Any, /, *args: Any, signal: Any = None, **_: Any) -> None:
        # faust calls this receiver on the worker's own loop. An assignment can come
        # before the app's task below has first run (a slow start), so the loop is
        # watched here too: readiness, which needs the assignment, never answers
        # without it (a second call for the same loop changes nothing).
        await watch_event_loop()
        tps: Iterable[Any] = args[0] if args else ()
        membership.assigned(((tp.topic, tp.partition) for tp in tps),
                            getattr(app, "consumer_generation_id", None))
        log.info("group assignment: %s", membership.check(health.stall_s)[1])
        # faust runs aiokafka in a thread with a loop of its own (a ServiceThread's
        # ``thread_loop``); it exists once the consumer has started.
        thread_loop = getattr(getattr(app.consumer, "_thread", None), "thread_loop", None)
        if isinstance(thread_loop, asyncio.AbstractEventLoop):
            health.watch_loop("consumer thread", thread_loop)

    app.on_partitions_revoked.connect(revoked)
    app.on_partitions_assigned.connect(assigned)
    app.task(watch_event_loop)
    health.readiness_check("group", lambda: membership.check(health.stall_s))
    if stores_open is not None:
        health.readiness_check("stores", stores_open)
    return membership
