"""Faults on the three-node stack: which process, which signal, for how long.

Each scenario is an async callable given the running ``Workload``: it waits for the
workload's warm-up, marks the phase ``during``, injects the fault, lifts it after its
hold time, marks ``after`` and records when it was lifted (``lifted_at``, for the lag
measurement). Processes are found through the stack's own pid files
(``deploy.stack``); a killed stack node is restarted with ``deploy.stack up`` (which
starts only what is not running), a killed service by its supervisor.
"""
from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable

from deploy.stack import cassandra, cgroups, kafka, postgres
from deploy.stack.layout import REPO, Layout
from deploy.stack.toolchain import ensure_nft
from services.shared.clients import kafka as kafka_clients
from services.shared.settings import KafkaSettings

from .workload import Workload


@dataclass
class FaultLog:
    injected: list[str] = field(default_factory=list)
    started_at: float = 0.0
    lifted_at: float = 0.0
    # When the fault proper began, if later than ``started_at`` (the backlog's node kill
    # comes after its load): goodput is judged outside [fault_at, lifted_at].
    fault_at: float = 0.0
    # What a scenario set up and must undo once the checker is done (run in order).
    cleanup: list[Callable[[], Any]] = field(default_factory=list)
    # What a scenario saw that says whether it tested what it is for (the report's).
    evidence: dict[str, Any] = field(default_factory=dict)


def _signal(pid: int | None, sig: signal.Signals, what: str, log: FaultLog) -> None:
    if pid is None:
        raise RuntimeError(f"{what} is not running")
    os.kill(pid, sig)
    log.injected.append(f"{sig.name} {what} (pid {pid}) at {time.strftime('%H:%M:%S')}")


async def _stack_up(log: FaultLog) -> None:
    started = time.monotonic()
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "deploy.stack", "up", "--nodes", "3",
                                                cwd=str(REPO), stdout=subprocess.DEVNULL,
                                                stderr=subprocess.PIPE)
    _, err = await proc.communicate()
    if proc.returncode != 0:
        text = err.decode()
        # The stack's own error line first (every StackError reads "stack: ..."), then the
        # log tail it quotes.
        reason = next((line for line in text.splitlines() if line.startswith("stack: ")), "")
        raise RuntimeError(f"deploy.stack up failed: {reason}\n{text[-500:]}")
    log.injected.append(f"deploy.stack up took {time.monotonic() - started:.0f} s")


def busiest_broker(settings: KafkaSettings) -> int:
    """The broker id that leads the most partitions (broker ids are 1..3 here)."""
    meta = kafka_clients.admin(settings).list_topics(timeout=10)
    counts: dict[int, int] = {}
    for topic in meta.topics.values():
        for part in topic.partitions.values():
            counts[part.leader] = counts.get(part.leader, 0) + 1
    return max(counts, key=counts.get)  # type: ignore[arg-type]


Scenario = Callable[[Workload], Awaitable[None]]

# The nftables table the cut scenarios own (deleted whole when the cut is lifted).
NFT_TABLE = "feed_faults"


def _nft(script: str) -> None:
    subprocess.run(["nft", "-f", "-"], input=script.encode(), check=True, capture_output=True)


def cut_off(host: str, ports: list[int], log: FaultLog, what: str, layout: Layout) -> None:
    """Cut server ``what`` (a stack daemon's name) at ``host`` off the network: every
    packet to or from its listeners (``host`` with one of ``ports``), and everything its
    own sockets send, wherever to (it runs in a cgroup of its own, deploy/stack/cgroups.py).

    A node's outgoing connections leave from 127.0.0.1 whatever its own address, so rules
    on addresses cannot tell them apart: rules on ``saddr host`` with a peer's port cut
    only one way for nodes 2 and 3 (a cut broker still heartbeated to the controller and
    was never fenced) and, for node 1 at 127.0.0.1, cut every client off every broker.
    The node keeps running; a node at ``host`` that shares it with another service, Kafka
    beside Cassandra, keeps the other service's ports. Loopback traffic passes the output
    hook, once per packet."""
    ensure_nft(layout.logs / "nftables-install.log")
    lift_cut()
    port_set = ", ".join(str(p) for p in ports)
    own = cgroups.nft_match(layout.run, what)
    _nft(f"""table inet {NFT_TABLE} {{
  chain out {{
    type filter hook output priority 0; policy accept;
    ip daddr {host} tcp dport {{ {port_set} }} drop
    ip saddr {host} tcp sport {{ {port_set} }} drop
{f"    {own} drop" if own else ""}
  }}
}}
""")
    both = ("both ways: its own sockets' packets dropped too" if own else
            "one way only: it runs in no cgroup of its own, so what it sends passes")
    log.injected.append(f"nftables: {what} ({host} ports {port_set}) cut off at "
                        f"{time.strftime('%H:%M:%S')}, {both}")


def lift_cut(log: FaultLog | None = None) -> None:
    """Remove the scenario's table if it is there (also on the way out of a failed run)."""
    if subprocess.run(["nft", "list", "table", "inet", NFT_TABLE], capture_output=True).returncode == 0:
        _nft(f"delete table inet {NFT_TABLE}\n")
        if log is not None:
            log.injected.append(f"nftables: cut lifted at {time.strftime('%H:%M:%S')}")


def scenario(name: str, warmup_s: float, hold_s: float, log: FaultLog, layout: Layout) -> Scenario:
    async def run(w: Workload) -> None:
        group = None
        if name == "fanout-group-kill":
            # Three fan-out workers before the warm-up: the joins' rebalances are over
            # by the fault (scale.py).
            from .scale import WORKERS, FanoutGroup
            group = FanoutGroup(w.settings, layout)
            log.evidence["group"] = group.evidence
            log.cleanup += [lambda: setattr(group.evidence, "after", group.settled()), group.close]
            started = await asyncio.to_thread(group.ensure)
            log.injected.append(f"started {', '.join(started) or 'none'} beside the stack's fan-out: "
                                f"{WORKERS} workers in its group")
        await asyncio.sleep(warmup_s)
        w.phase = "during"
        log.started_at = time.time()
        if name == "cassandra-kill":
            # Node 3 (never the seed): SIGKILL mid-traffic, back after hold_s.
            _signal(cassandra.daemon(layout, 3).pid(), signal.SIGKILL, "cassandra-3", log)
            await asyncio.sleep(hold_s)
            await _stack_up(log)
        elif name == "cassandra-pause":
            pid = cassandra.daemon(layout, 3).pid()
            _signal(pid, signal.SIGSTOP, "cassandra-3", log)
            await asyncio.sleep(hold_s)
            _signal(pid, signal.SIGCONT, "cassandra-3", log)
        elif name == "broker-kill":
            broker = busiest_broker(w.settings)
            _signal(kafka.daemon(layout, broker).pid(), signal.SIGKILL, f"kafka-{broker}", log)
            await asyncio.sleep(hold_s)
            await _stack_up(log)
        elif name == "cassandra-cut":
            cut_off(layout.hosts[2], [layout.cassandra_port, layout.cassandra_storage_port], log,
                    "cassandra-3", layout)
            try:
                await asyncio.sleep(hold_s)
            finally:
                lift_cut(log)
        elif name == "broker-cut":
            broker = busiest_broker(w.settings)
            # The broker's listeners and its own sockets; the controller beside it on the
            # same address is another process and keeps its quorum (deploy/stack/kafka.py).
            cut_off(layout.hosts[broker - 1], kafka.broker_ports(layout), log, f"kafka-{broker}", layout)
            try:
                await asyncio.sleep(hold_s)
            finally:
                lift_cut(log)
        elif name == "postgres-restart":
            started = time.monotonic()
            await asyncio.to_thread(postgres.restart, layout)
            log.injected.append(f"postgres restarted (pg_ctl restart, fast) at "
                                f"{time.strftime('%H:%M:%S')} in {time.monotonic() - started:.1f} s")
            await asyncio.sleep(hold_s)
        elif name == "backlog":
            # The demo's backlog through Postgres (15k follows, 2,000 posts, 5k likes, with
            # users of its own), then a Cassandra node killed while it drains, back after
            # hold_s (the target: no collapse, nothing lost, no drift).
            from .backlog import load_backlog
            started = time.monotonic()
            w.backlog = await asyncio.to_thread(load_backlog, w.settings)
            log.injected.append(f"backlog loaded into Postgres in {time.monotonic() - started:.1f} s: "
                                f"{w.backlog.counts}")
            await asyncio.sleep(BACKLOG_KILL_AFTER_S)
            log.fault_at = time.time()
            _signal(cassandra.daemon(layout, 3).pid(), signal.SIGKILL, "cassandra-3", log)
            await asyncio.sleep(hold_s)
            await _stack_up(log)
        elif name == "pipeline-stall":
            # The relay, the fan-out and the ranker frozen together (SIGSTOP): nothing
            # reaches Cassandra, so only the read path's check against Postgres can honour
            # the deletes, removals, blocks and unfollows acknowledged meanwhile.
            pids = {service: _service_pid(layout, service) for service in ("cdc", "fanout", "ranker")}
            for service, pid in pids.items():
                _signal(pid, signal.SIGSTOP, service, log)
            try:
                await asyncio.sleep(hold_s)
            finally:
                for service, pid in pids.items():
                    try:
                        _signal(pid, signal.SIGCONT, service, log)
                    except ProcessLookupError:  # gone meanwhile: its supervisor restarts it
                        log.injected.append(f"{service} (pid {pid}) was gone at SIGCONT")
        elif name == "lost-hide":
            # The relay frozen and its slot dropped while hides are made; let go, it
            # snapshots again and the unfollows made meanwhile never reach the copies
            # (lost_hide.py). The hides lost are counted before the verifier may repair.
            from .lost_hide import audit, lose_the_slot
            w.lost_hide = await lose_the_slot(w.settings, _service_pid(layout, "cdc"), hold_s,
                                              log.injected)
            log.lifted_at = time.time()
            w.phase = "after"
            # No later block or follow may heal a lost hide before the verifier gets to it
            # (any write to a pair sets its copies through the working pipeline): the
            # toggles pause until the verifier has released the hold's entries.
            w.toggles_paused = True
            await audit(w.settings, w.lost_hide, log.injected)
            return
        elif name == "worker-kills":
            # The relay, the fan-out and the ranker, each SIGKILLed three times at random
            # points; their supervisor (deploy.supervise) restarts them.
            for _round in range(3):
                for service in ("cdc", "fanout", "ranker"):
                    _signal(_service_pid(layout, service), signal.SIGKILL, service, log)
                    await asyncio.sleep(w.rng.uniform(2, hold_s / 9))
        elif name == "fanout-group-kill":
            # One of three fan-out workers SIGKILLed mid-drain (the backlog), its
            # supervisor frozen for hold_s: its partitions move to the two others, then
            # back when it restarts (scale.py).
            from .scale import fanout_group_kill
            assert group is not None
            await fanout_group_kill(w, group, hold_s, BACKLOG_KILL_AFTER_S, log.injected,
                                    lambda at: setattr(log, "fault_at", at))
        elif name in ROLE_DOWN:
            # One role's process killed and kept down for longer than its alert's 1 min
            # "for": its supervisor is frozen first so it cannot restart it, then let go
            # after the hold, and restarts it. The role's "down" alert must fire and
            # clear; meanwhile the fence still honours every hide, and nothing acked is
            # lost once it is back (the API: requests fail meanwhile, none is acked).
            role = ROLE_DOWN[name]
            supervisor = _service_pid(layout, role, supervisor=True)
            _signal(supervisor, signal.SIGSTOP, f"{role}'s supervisor", log)
            try:
                _signal(_service_pid(layout, role), signal.SIGKILL, role, log)
                await asyncio.sleep(hold_s)
            finally:
                _signal(supervisor, signal.SIGCONT, f"{role}'s supervisor", log)
        elif name == "postgres-down":
            # Postgres stopped (fast) and kept down past PostgresDown's 30 s "for": the API
            # answers 503, the relay waits for its slot; nothing acked may be lost.
            await asyncio.to_thread(postgres.down, layout)
            log.injected.append(f"postgres stopped (pg_ctl stop, fast) at {time.strftime('%H:%M:%S')}")
            try:
                await asyncio.sleep(hold_s)
            finally:
                started = time.monotonic()
                await asyncio.to_thread(postgres.up, layout)
                log.injected.append(f"postgres started again in {time.monotonic() - started:.1f} s")
        else:
            raise ValueError(f"unknown scenario {name}")
        log.lifted_at = time.time()
        w.phase = "after"
    return run


def _service_pid(layout: Layout, service: str, *, supervisor: bool = False) -> int | None:
    """The worker process itself (the supervisor's child), or with ``supervisor`` the
    ``deploy.supervise`` process that restarts it: the first process of the role
    (``deploy.services``' pid file; with several workers of a role, always the same
    one), else found by its command line."""
    from deploy.services import daemon

    from .scale import child_pid
    recorded = daemon(layout, service).pid()
    if recorded is not None:
        return recorded if supervisor else child_pid(recorded)
    marker = f"services.{service}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"-m" in cmd and marker in cmd and (b"deploy.supervise" in cmd) == supervisor:
            return int(entry.name)
    return None


SCENARIOS = ("cassandra-kill", "cassandra-pause", "cassandra-cut", "broker-kill", "broker-cut",
             "postgres-restart", "worker-kills", "pipeline-stall", "backlog", "lost-hide",
             "fanout-down", "relay-down", "ranker-down", "api-down", "postgres-down",
             "fanout-group-kill")
# The "<role>-down" scenarios: the process of that role (deploy.services' name) killed.
ROLE_DOWN = {"fanout-down": "fanout", "relay-down": "cdc", "ranker-down": "ranker",
             "api-down": "api"}
# cassandra-kill: the node must stay down past its alert's 1 min "for" plus a scrape and
# an evaluation (5 s each) even when its restart is quick: with 30 s, a 32 s restart
# brought it back 62 s after the kill and the alert never fired (2026-12-06).
# broker-kill: KafkaUnderReplicatedPartitions must fire while the broker is down: the
# controller fences it (3 s), a scrape and an evaluation see the other leaders' ISRs
# shrunk (5 s each), then the rule's 30 s "for": ~43 s; with 20 s its broker was back
# in ~35 s and the rule would never fire.
HOLD_S = {"cassandra-kill": 50.0, "cassandra-pause": 20.0, "cassandra-cut": 30.0,
          "broker-kill": 50.0, "broker-cut": 30.0, "postgres-restart": 20.0, "worker-kills": 45.0,
          "pipeline-stall": 60.0, "backlog": 30.0, "lost-hide": 20.0,
          # Over the alert's 1 min "for", plus a scrape and an evaluation (5 s each).
          "fanout-down": 90.0, "relay-down": 90.0, "ranker-down": 90.0, "api-down": 90.0,
          # Over PostgresDown's 30 s "for", a scrape and an evaluation, as broker-kill.
          "postgres-down": 50.0,
          # Past the session timeout (6 s) and the rebalance to the two workers left, with
          # time for them to apply the victim's share before it comes back.
          "fanout-group-kill": 30.0}
# The backlog drains this long before its node is killed: the kill lands mid-drain.
BACKLOG_KILL_AFTER_S = 20.0
