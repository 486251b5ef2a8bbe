"""The ``fanout-group-kill`` scenario's parts (docs/reliability.md): three fan-out workers
in the fan-out's consumer group (the stack's one and two started here through
``deploy.services``, each under its own supervisor), the demo's backlog through Postgres,
and one of the three SIGKILLed while it drains. Its supervisor is frozen for the hold,
so its partitions move to the other two (after ``FEED_KAFKA_SESSION_TIMEOUT_S``), and
let go after it, so the worker comes back and takes its share again: every partition
it held changes hands twice while messages of it were applied but not committed.

The group's own view (``deploy.assignment``, the coordinator's assignment) is recorded
before the kill, during the hold and after the run (``GroupEvidence``): the run only
counts when the three held partitions each before the kill and the two left held every
partition during the hold. The checker then counts what was lost or duplicated as for
every other scenario (the workload's feeds, the backlog's counts).
"""
from __future__ import annotations

import asyncio
import os
import signal
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from deploy.assignment import Group, describe, held
from deploy.services import daemon, start
from deploy.stack.layout import Layout
from deploy.stack.process import stop
from deploy.stack.workers import worker_counts
from services.shared.settings import Settings

WORKERS = 3
# The worker killed: one of the two started here, so the stack's own is never the victim
# (the other scenarios act on it).
VICTIM = "fanout-1"


@dataclass
class GroupEvidence:
    """The fan-out group's assignment around the kill (the coordinator's view)."""

    before: dict[str, Any] = field(default_factory=dict)
    during: dict[str, Any] = field(default_factory=dict)
    after: dict[str, Any] = field(default_factory=dict)
    victim: str = ""
    draining_lag_at_kill: int | None = None

    def problems(self) -> list[str]:
        """Why the run did not test what it is for (empty: it did)."""
        out = []
        members = self.before.get("members", {})
        if len(members) < WORKERS:
            out.append(f"{len(members)} fan-out members before the kill, not {WORKERS}")
        elif any(not m["partitions"] for m in members.values()):
            out.append("a fan-out member held no partition before the kill")
        if self.victim and self.victim not in members:
            out.append(f"the victim ({self.victim}) was not a member before the kill")
        left = self.during.get("members", {})
        if self.victim in left:
            out.append("the killed worker was still a member during the hold")
        if not left or self.during.get("partitions_held") != self.before.get("partitions_held"):
            out.append("the workers left did not hold every partition during the hold "
                       f"({self.during.get('partitions_held')} of {self.before.get('partitions_held')})")
        if self.draining_lag_at_kill is not None and self.draining_lag_at_kill == 0:
            out.append("nothing was waiting when the worker was killed: not mid-drain")
        return out

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "problems": self.problems()}


def snapshot(group: Group, names: dict[str, str], prefix: str) -> dict[str, Any]:
    """A group's state, its members by worker name (``names``: address -> name), what
    each holds, and how many partitions are held in all."""
    members = {names.get(m.address or "", m.client_id): {
        "partitions": len(m.partitions), "held": held(m, prefix)} for m in group.members}
    return {"at": round(time.time(), 1), "state": group.state, "members": members,
            "partitions_held": sum(len(m.partitions) for m in group.members)}


def child_pid(parent: int, proc: Path = Path("/proc")) -> int | None:
    """A child of ``parent`` (a supervisor runs one: its worker), from /proc."""
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may hold spaces and parentheses.
        fields = stat[stat.rindex(")") + 2:].split()
        if len(fields) > 1 and int(fields[1]) == parent:
            return int(entry.name)
    return None


class FanoutGroup:
    """The three fan-out workers of the scenario: started, watched, and the two started
    here stopped again at the end (``close``)."""

    def __init__(self, settings: Settings, layout: Layout) -> None:
        self.settings = settings
        self.layout = layout
        self.started: list[str] = []
        self.evidence = GroupEvidence(victim=VICTIM)
        from deploy.stack.workers import instances
        self._names = {f"127.0.0.1:{i.port}": i.name
                       for i in instances(settings, self.counts()) if i.role == "fanout"}
        self._group = settings.fanout_group_id or f"{settings.topic_prefix}.fanout"

    def ensure(self) -> list[str]:
        """Three fan-out workers, started through ``deploy.services`` (each ready: a
        member of the group, its stores open)."""
        self.started = start(self.layout, ["fanout"], counts=self.counts())
        return self.started

    @staticmethod
    def counts() -> dict[str, int]:
        """The stack's worker counts, with at least ``WORKERS`` fan-out workers."""
        counts = worker_counts()
        return {**counts, "fanout": max(WORKERS, counts["fanout"])}

    def look(self) -> dict[str, Any]:
        [group] = describe(self.settings, [self._group], timeout_s=10)
        return snapshot(group, self._names, self.settings.topic_prefix + ".")

    def settled(self, timeout_s: float = 60.0) -> dict[str, Any]:
        """The group once it is stable with every worker a member (or as it is then)."""
        deadline = time.monotonic() + timeout_s
        while True:
            seen = self.look()
            if (seen["state"] == "STABLE" and len(seen["members"]) >= WORKERS) or time.monotonic() > deadline:
                return seen
            time.sleep(1.0)

    def supervisor_and_worker(self, name: str) -> tuple[int, int]:
        supervisor = daemon(self.layout, name).pid()
        if supervisor is None:
            raise RuntimeError(f"{name} is not running")
        worker = child_pid(supervisor)
        if worker is None:
            raise RuntimeError(f"{name}'s supervisor (pid {supervisor}) has no worker")
        return supervisor, worker

    def close(self) -> list[str]:
        """Stop the workers started here, and point Prometheus back at the stack's own."""
        stopped = [n for n in reversed(self.started) if stop(daemon(self.layout, n), grace=20)]
        try:
            from deploy.stack import prometheus
            prometheus.refresh(self.layout, worker_counts())
        except Exception:  # noqa: BLE001 - the suite's result stands either way
            pass
        return stopped


async def fanout_group_kill(w: Any, group: FanoutGroup, hold_s: float, kill_after_s: float,
                            injected: list[str], fault_at: Callable[[float], None]) -> None:
    """The fault proper, after the warm-up: the backlog loaded, then ``VICTIM`` killed
    ``kill_after_s`` later with its supervisor frozen for ``hold_s``."""
    from deploy.pipeline_progress import PipelineOffsets

    from .backlog import load_backlog

    ev = group.evidence
    ev.before = await asyncio.to_thread(group.settled)
    injected.append(f"fan-out group before the kill: {ev.before['members']}")
    started = time.monotonic()
    w.backlog = await asyncio.to_thread(load_backlog, w.settings)
    injected.append(f"backlog loaded into Postgres in {time.monotonic() - started:.1f} s: "
                    f"{w.backlog.counts}")
    await asyncio.sleep(kill_after_s)
    offsets = PipelineOffsets(w.settings, timeout_s=4.0)
    try:
        ev.draining_lag_at_kill = (await asyncio.to_thread(offsets.read)).lag
    except Exception:  # noqa: BLE001 - unknown is not "nothing waiting"
        ev.draining_lag_at_kill = None
    finally:
        offsets.close()
    supervisor, worker = group.supervisor_and_worker(VICTIM)
    fault_at(time.time())
    os.kill(supervisor, signal.SIGSTOP)
    injected.append(f"SIGSTOP {VICTIM}'s supervisor (pid {supervisor}) at {time.strftime('%H:%M:%S')}")
    try:
        os.kill(worker, signal.SIGKILL)
        injected.append(f"SIGKILL {VICTIM} (pid {worker}) at {time.strftime('%H:%M:%S')}, "
                        f"{ev.draining_lag_at_kill} events waiting")
        # The session timeout (6 s) and the rebalance: who holds what once the group is
        # stable without the victim (or as it is near the end of the hold).
        killed_at = time.monotonic()
        deadline = killed_at + max(hold_s - 3.0, 1.0)
        while True:
            ev.during = await asyncio.to_thread(group.look)
            moved = ev.during["state"] == "STABLE" and VICTIM not in ev.during["members"]
            if moved or time.monotonic() > deadline:
                break
            await asyncio.sleep(1.0)
        ev.during["after_kill_s"] = round(time.monotonic() - killed_at, 1)
        injected.append(f"fan-out group {ev.during['after_kill_s']} s after the kill: {ev.during['members']}")
        await asyncio.sleep(max(0.0, hold_s - (time.monotonic() - killed_at)))
    finally:
        os.kill(supervisor, signal.SIGCONT)
        injected.append(f"SIGCONT {VICTIM}'s supervisor at {time.strftime('%H:%M:%S')}: it restarts the worker")
