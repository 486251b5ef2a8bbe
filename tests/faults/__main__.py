"""``make faults``: fault scenarios on the three-node stack, under a steady API workload.

    python -m tests.faults [--scenario cassandra-kill,...] [--after 30] [--warm-up 60]
        [--out DIR]

Needs the three-node stack with migrations and services running (``make faults`` does
all of it). First a warm-up: the same workload with no fault for ``--warm-up`` seconds
and on until the stack is steady (``steady``: a window with no failed answer and fresh
posts, at most 5x ``--warm-up``), then the lag back to zero (a stack just started has
cold JVMs: in the first scenario after one, reads timed out on every node and posts
took 50-100 s to show before any fault; ``<out>/warm-up.json`` keeps what it saw). Per
scenario: set-up (fresh users and follows), the workload with the fault injected after
a warm-up, lifted after its hold time, and ``--after`` seconds of load past the lift,
then the watcher's last looks, settling (the fan-out and ranker groups' lag back to
zero), then the checker (``checker.py``). Writes ``<out>/<scenario>.json`` and prints
one report row per scenario; exits 1 when a target is missed (docs/reliability.md
lists them).
"""
from __future__ import annotations

import argparse
import asyncio
import faulthandler
import json
import os
import sys
import threading
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from deploy.stack.layout import REPO, Layout
from services.shared.domain.rules import iso_utc
from services.shared.settings import Settings, get_settings

from .backlog import GoodputWatch, goodput_summary
from .checker import Verdict, author_tier, check
from .injectors import HOLD_S, SCENARIOS, FaultLog, scenario
from .lost_hide import settle
from .workload import Workload

SETTLE_LIMIT_S = 240
# How long the watcher keeps looking after the load for posts it has not seen yet.
WATCH_REST_LIMIT_S = 120
WARMUP_S = 20.0
# The stack-wide warm-up runs until a window of this many seconds had no failed answer and
# its posts' freshness p95 within the target (docs/reliability.md: 5 s), at most this many
# times its minimum: 60 s of load were not always enough on a cold CI machine (165
# answers 503 and freshness p95 16 s in the kill that followed, 2026-12-01).
STEADY_WINDOW_S = 15.0
STEADY_FRESHNESS_S = 5.0
# 3x (180 s) ran out on 2026-12-02 while freshness was coming down through 1-2 s (the
# three-node stack now runs six Kafka processes), and the first scenario then measured
# the end of the cold start.
WARM_UP_LIMIT_FACTOR = 5
# The alert each scenario must raise while its fault lasts and clear after the lift
# (deploy/prometheus/rules.yml, evaluated by the stack's Prometheus scraping the services
# and the stores' exporters). Only faults held past their rule's "for": broker-kill's
# broker stays down 50 s (injectors.HOLD_S), and the other leaders' under-replicated
# partitions (the brokers' JMX exporters) must fire past the rule's 30 s.
EXPECTED_ALERT = {"cassandra-kill": "FeedCassandraNodeUnreachable", "fanout-down": "FeedFanoutDown",
                  "broker-kill": "KafkaUnderReplicatedPartitions"}
# After the lift: the driver and librdkafka see the node back within seconds of its
# restart, then the rule's next evaluation clears the alert.
ALERT_RESOLVE_LIMIT_S = 120


def _settings() -> Settings:
    os.environ.setdefault("FEED_DEV_MODE", "true")
    Layout.from_env().use_as_default()
    return get_settings()


class _Sampler:
    """A daemon thread taking samples (``_run``) from ``start`` until ``stop``."""

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        raise NotImplementedError

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=15)


class AlertWatch(_Sampler):
    """The firing alerts of the stack's Prometheus, polled every 2 s (``/api/v1/alerts``)."""

    def __init__(self) -> None:
        from deploy.stack import prometheus
        super().__init__()
        self.url = f"http://{prometheus.address()}/api/v1/alerts"
        self.samples: list[tuple[float, frozenset[str] | None]] = []

    def firing(self) -> frozenset[str] | None:
        import urllib.request
        try:
            with urllib.request.urlopen(self.url, timeout=2) as resp:
                alerts = json.load(resp)["data"]["alerts"]
        except Exception:  # noqa: BLE001 - Prometheus unreachable: unknown, not "none firing"
            return None
        return frozenset(a["labels"]["alertname"] for a in alerts if a["state"] == "firing")

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.time(), self.firing()))
            self._stop.wait(2.0)

    def summary(self, alert: str, fault_at: float, lifted_at: float) -> dict[str, Any]:
        """When ``alert`` first fired after the fault, and when it was last seen firing
        before a sample without it after the lift (seconds; None: never)."""
        known = [(at, names) for at, names in self.samples if names is not None]
        fired = next((at for at, names in known if at >= fault_at and alert in names), None)
        resolved = None
        if fired is not None:
            resolved = next((at for at, names in known if at >= max(fired, lifted_at)
                             and alert not in names), None)
        return {"alert": alert, "polls": len(self.samples), "unreachable_polls": len(self.samples) - len(known),
                "fired_after_fault_s": None if fired is None else round(fired - fault_at, 1),
                "resolved_after_lift_s": None if resolved is None else round(resolved - lifted_at, 1),
                "ok": fired is not None and fired <= lifted_at and resolved is not None}


class LagWatch(_Sampler):
    """The fan-out's and the ranker's total consumer lag, sampled every second."""

    def __init__(self, settings: Settings) -> None:
        super().__init__()
        self.settings = settings
        self.samples: list[tuple[float, int | None]] = []
        prefix = settings.topic_prefix
        self.groups = {settings.fanout_group_id or f"{prefix}.fanout",
                       settings.ranker_group_id or f"{prefix}.ranker"}

    def _run(self) -> None:
        # Each group's committed offsets are read by a consumer of that group (committed(),
        # which never joins it), not by the admin client's ListConsumerGroupOffsets: on a
        # NOT_COORDINATOR answer, which a fault makes likely, librdkafka 2.16 handles that
        # response through the client's group handle, NULL in an admin client, and its
        # main thread segfaults (two suite runs here, "segfault at 58 ... librdkafka" in
        # the kernel log; confluentinc/confluent-kafka-javascript#374 has the stack).
        from confluent_kafka import TopicPartition

        from services.shared.clients import kafka

        conf = {"enable.auto.commit": False}
        readers = {g: kafka.consumer(self.settings, {**conf, "group.id": g}) for g in self.groups}
        prefix = f"{self.settings.topic_prefix}."
        try:
            while not self._stop.is_set():
                try:
                    probe = next(iter(readers.values()))
                    meta = probe.list_topics(timeout=5)
                    parts = [TopicPartition(t, p) for t, tm in meta.topics.items()
                             if t.startswith(prefix) for p in tm.partitions]
                    done = [tp for reader in readers.values()
                            for tp in reader.committed(parts, timeout=5) if tp.offset >= 0]
                    ends = {(tp.topic, tp.partition): probe.get_watermark_offsets(tp, timeout=5)[1]
                            for tp in done}
                    lag = sum(max(0, ends[(tp.topic, tp.partition)] - tp.offset) for tp in done)
                except Exception:  # noqa: BLE001 - a broker down: unknown, not zero
                    lag = None
                self.samples.append((time.time(), lag))
                self._stop.wait(1.0)
        finally:
            for reader in readers.values():
                reader.close()

    def recovered_after(self, fault_at: float, lifted_at: float) -> float | None:
        """Seconds from the lift until the lag is back at what it was under the same load
        before the fault (its warm-up maximum, at least 10): the workload keeps writing,
        so "zero" is only reached when it stops."""
        before = [lag for at, lag in self.samples if at < fault_at and lag is not None]
        ceiling = max([10, *before])
        for at, lag in self.samples:
            if at >= lifted_at and lag is not None and lag <= ceiling:
                return round(at - lifted_at, 1)
        return None

    def zero_after(self, t: float) -> float | None:
        """Seconds from ``t`` to the first sample at lag zero."""
        for at, lag in self.samples:
            if at >= t and lag == 0:
                return round(at - t, 1)
        return None

    def max_lag(self) -> int | None:
        known = [lag for _, lag in self.samples if lag is not None]
        return max(known) if known else None


async def lag_settled(lag: LagWatch) -> None:
    """Until the groups' lag has been zero for a sample (at most ``SETTLE_LIMIT_S``)."""
    deadline = time.time() + SETTLE_LIMIT_S
    while time.time() < deadline and lag.zero_after(time.time() - 1.5) is None:
        await asyncio.sleep(1)


def quantile(values: list[float], q: float) -> float | None:
    """Nearest-rank quantile of ``values`` (sorted here), rounded to 10 ms; None if empty."""
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[int(q * (len(ordered) - 1))], 2)


def failed(statuses: Counter) -> int:
    """Answers that failed: 5xx (503 included) and transport errors. (The workload's 403s
    and 404s answer what it does on purpose: liking a deleted post, reading a blocked
    author, posting while suspended.)"""
    return sum(n for code, n in statuses.items() if code.startswith("5") or not code.isdigit())


async def steady(w: Workload, minimum_s: float, limit_s: float) -> bool:
    """After ``minimum_s``, until the last ``STEADY_WINDOW_S`` had no failed answer and
    the posts acked in it showed within ``STEADY_FRESHNESS_S`` (p95), or ``limit_s``
    in all. False: the limit came first."""
    started = time.time()
    await asyncio.sleep(minimum_s)
    while time.time() - started < limit_s:
        statuses = w.ledger.statuses["before"]
        failed_before, window_start = failed(statuses), time.time()
        await asyncio.sleep(STEADY_WINDOW_S)
        fresh = [s for at, s in w.ledger.freshness_s if at >= window_start - STEADY_WINDOW_S]
        p95 = quantile(fresh, 0.95)
        if failed(statuses) == failed_before and p95 is not None and p95 <= STEADY_FRESHNESS_S:
            return True
    return False


async def warm_up(seconds: float, settings: Settings) -> dict[str, Any]:
    """The workload with no fault until the stack is steady (``steady``: at least
    ``seconds``, at most ``WARM_UP_LIMIT_FACTOR`` times that), then the lag back to zero;
    what the API answered meanwhile, and the posts' freshness (seconds to the first page)."""
    w = Workload(settings, seed=0)
    await w.open()
    reached: list[bool] = []
    try:
        await w.setup()
        lag = LagWatch(settings)
        lag.start()
        started = time.time()

        async def hold(workload: Workload) -> None:
            reached.append(await steady(workload, seconds, seconds * WARM_UP_LIMIT_FACTOR))

        await w.run(0.0, hold)
        await lag_settled(lag)
        lag.stop()
    finally:
        await w.close()
    statuses = Counter()
    for phase in w.ledger.statuses.values():
        statuses.update(phase)
    return {"seconds": round(time.time() - started, 1), "steady": bool(reached and reached[0]),
            "statuses": dict(statuses),
            "freshness_p95_s": quantile([s for _, s in w.ledger.freshness_s], 0.95),
            "freshness_samples": [(round(at - started, 1), round(s, 2)) for at, s in w.ledger.freshness_s]}


async def run_one(name: str, after_s: float, settings: Settings, layout: Layout) -> dict[str, Any]:
    w = Workload(settings, seed=sum(map(ord, name)))
    log = FaultLog()
    await w.open()
    try:
        await w.setup()
        w.start_stream()
        await asyncio.sleep(3)
        lag = LagWatch(settings)
        lag.start()
        goodput = GoodputWatch(settings)
        goodput.start()
        alerts = AlertWatch() if name in EXPECTED_ALERT else None
        if alerts is not None:
            alerts.start()
        started = time.time()
        await w.run(after_s, scenario(name, WARMUP_S, HOLD_S[name], log, layout))
        load_ended = time.time()
        unseen = await w.watch_rest(WATCH_REST_LIMIT_S)
        # Settle: lag back to zero (measured from when the fault was lifted), then the
        # notices and snapshots a few seconds more.
        await lag_settled(lag)
        await asyncio.sleep(5)
        lag.stop()
        goodput.stop()
        lost_hide = None
        if w.lost_hide is not None:
            # The verifier's repairs, then the fence's release of the entries: the checker
            # then judges on the repaired copies alone.
            lost_hide = await settle(settings, w.lost_hide)
            w.toggles_paused = False
        verdict = await check(settings, w)
        if alerts is not None:  # give the alert its time to clear (it may already have)
            deadline = time.time() + ALERT_RESOLVE_LIMIT_S
            while time.time() < deadline and alerts.summary(
                    EXPECTED_ALERT[name], log.started_at, log.lifted_at)["resolved_after_lift_s"] is None:
                await asyncio.sleep(2)
            alerts.stop()
    finally:
        await w.close()
        for undo in log.cleanup:  # what the scenario set up (fanout-group-kill's workers)
            try:
                await asyncio.to_thread(undo)
            except Exception as exc:  # noqa: BLE001 - recorded, the result stands
                log.injected.append(f"clean-up failed: {type(exc).__name__}: {exc}")
    fresh_during = [s for at, s in w.ledger.freshness_s if log.started_at <= at <= log.lifted_at + 5]
    during = w.ledger.statuses["during"]
    reads_failed = failed(during)
    result = {
        "scenario": name, "date": iso_utc(datetime.fromtimestamp(int(started), timezone.utc), "seconds"),
        "machine": {"cores": os.cpu_count(), "nodes": layout.nodes},
        "seconds": round(time.time() - started, 1),
        "faults": log.injected, "verdict": verdict.as_dict(), "ok": verdict.ok(),
        "statuses": {k: dict(v) for k, v in w.ledger.statuses.items()},
        # Writes refused as suspended (403, also in "statuses"), per phase: expected while
        # a suspension of the author was in force, else wrong (the verdict's wrongly_refused).
        "refusals": {k: dict(v) for k, v in w.ledger.refusals.items()},
        "non_2xx_during": reads_failed, "requests_during": sum(during.values()),
        "server_errors_other_than_503": sum(n for p in w.ledger.statuses.values() for code, n in p.items()
                                            if code.startswith("5") and code != "503"),
        "freshness_max_during_s": round(max(fresh_during), 2) if fresh_during else None,
        "freshness_p95_s": quantile([s for _, s in w.ledger.freshness_s], 0.95),
        # Posts owed to the watcher that it never saw (the checker judges them).
        "freshness_unseen": unseen,
        "freshness_by_phase": freshness_by_phase(w.ledger.freshness_s, log.started_at, log.lifted_at),
        "freshness_samples": [(round(at - started, 1), round(s, 2)) for at, s in w.ledger.freshness_s],
        "lag_recovered_after_lift_s": lag.recovered_after(log.started_at, log.lifted_at),
        "lag_zero_after_load_s": lag.zero_after(load_ended), "max_lag": lag.max_lag(),
        "lag_samples": [(round(at - started, 1), n) for at, n in lag.samples],
        "stream": stream_summary(w),
        "goodput": goodput_summary(goodput.samples, started, log.fault_at or log.started_at,
                                   log.lifted_at),
        "backlog": w.backlog.counts if w.backlog is not None else None,
        # The celebrity's posts must have gone to its author partition, not to inboxes:
        # otherwise the scenario did not test the merge at read time.
        "celebrity_tier": author_tier(settings, w.cast.celebrity),
    }
    if alerts is not None:
        result["alert"] = alerts.summary(EXPECTED_ALERT[name], log.started_at, log.lifted_at)
    if "group" in log.evidence:  # fanout-group-kill: the group's assignment around the kill
        result["group"] = log.evidence["group"].as_dict()
    if lost_hide is not None:
        # The dropped slot's rows were never sent (by design), and unlikes made meanwhile
        # are lost with it: the verifier repairs hides only (docs/operations.md). Both are
        # reported, not judged; the hides lost must all be repaired.
        v = verdict.as_dict()
        result["lost_hide"] = lost_hide
        result["ok"] = lost_hide["ok"] and Verdict(**{**v, "cdc_unsent": None, "like_drift": 0}).ok()
    return result


def freshness_by_phase(samples: list[tuple[float, float]], fault_at: float,
                       lifted_at: float) -> dict[str, dict[str, Any]]:
    """Ack-to-first-page seconds of the posts acked before the fault, during it (until 5 s
    after the lift, as ``freshness_max_during_s``) and after: count, p50, p95, max."""
    phases: dict[str, list[float]] = {"before": [], "during": [], "after": []}
    for at, seconds in samples:
        phase = "before" if at < fault_at else "during" if at <= lifted_at + 5 else "after"
        phases[phase].append(seconds)
    return {phase: {"posts": len(values), "p50_s": quantile(values, 0.5),
                    "p95_s": quantile(values, 0.95), "max_s": quantile(values, 1.0)}
            for phase, values in phases.items()}


def stream_summary(w: Workload) -> dict[str, Any]:
    """The watcher's stream: connections, events by kind, and ack-to-announcement seconds."""
    led = w.ledger
    kinds = Counter(kind for _, kind, _, _ in led.stream)
    delays = sorted(at - led.posts[post][1] for at, kind, post, _ in led.stream
                    if kind == "new_item" and post in led.posts)
    return {"connections": len(led.stream_opened), "statuses": dict(led.stream_statuses),
            "events": dict(kinds),
            "announce_p95_s": quantile(delays, 0.95),
            "announce_max_s": round(delays[-1], 2) if delays else None}


def row(r: dict[str, Any]) -> str:
    v = r["verdict"]
    share = (r["non_2xx_during"] / r["requests_during"] * 100) if r["requests_during"] else 0.0
    cdc = ("not traced" if v.get("cdc_unsent") is None
           else f"{v['cdc_unsent']} / {v['kafka_lost']}")
    return (f"| {r['scenario']} | {len(r['faults'])} | {v['acked_writes']} | {v['lost_writes'] + v['feed_lost']} "
            f"/ {v['feed_duplicated']} / {v['wrongly_visible']} "
            f"| {v.get('shown_after_ack', 0)} of {v.get('hiding_actions', 0)} actions, "
            f"{v.get('pages_checked', 0)} pages | {v.get('stream_gaps', 0)} | {cdc} "
            f"| {v['follower_drift']} / {v['like_drift']} "
            f"| {r['requests_during']} requests, {share:.1f}% failed, "
            f"{r['server_errors_other_than_503']} 5xx other than 503 | {r['freshness_max_during_s']} s "
            f"| {r['lag_recovered_after_lift_s']} s | {r['lag_zero_after_load_s']} s "
            f"| {_alert(r.get('alert'))} | {_verdict(r)} |")


def _alert(a: dict[str, Any] | None) -> str:
    if a is None:
        return "-"
    if a["fired_after_fault_s"] is None:
        return f"{a['alert']} never fired"
    cleared = (f"cleared {a['resolved_after_lift_s']} s after the lift"
               if a["resolved_after_lift_s"] is not None else "never cleared")
    return f"{a['alert']} fired {a['fired_after_fault_s']} s after the fault, {cleared}"


def _verdict(r: dict[str, Any]) -> str:
    if r["ok"] and r.get("backlog") and r.get("goodput", {}).get("collapsed"):
        return "MISSED (goodput collapsed while the backlog drained)"
    if r["ok"] and r.get("celebrity_tier", "celebrity") != "celebrity":
        return "MISSED (the celebrity was not promoted)"
    if r["ok"] and r.get("group", {}).get("problems"):
        return f"MISSED (not a test of the group: {'; '.join(r['group']['problems'])})"
    if r["ok"] and r.get("alert", {}).get("ok", True):
        return "ok"
    if r["ok"]:
        return "MISSED (alert)"
    over = r["verdict"].get("readers_over_cap")
    return f"INCONCLUSIVE ({over} readers owed more than the inbox cap keeps)" if over else "MISSED"



def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.faults", description=__doc__)
    parser.add_argument("--scenario", default=",".join(SCENARIOS))
    parser.add_argument("--after", type=float, default=30.0, help="seconds of load after the lift")
    parser.add_argument("--warm-up", type=float, default=60.0,
                        help="seconds of fault-free load before the first scenario, at least "
                             "(then on until the stack is steady; 0: none)")
    parser.add_argument("--out", default=str(REPO / "bench" / "out" / "faults"))
    args = parser.parse_args(argv)
    # A crash in a C extension (librdkafka, the Cassandra driver) prints every thread's
    # Python stack instead of only "Segmentation fault".
    faulthandler.enable()
    settings = _settings()
    layout = Layout.from_env()
    if layout.nodes != 3:
        print("faults: the three-node stack is not running (make faults starts it)", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows, ok = [], True
    if args.warm_up > 0:
        warm = asyncio.run(warm_up(args.warm_up, settings))
        (out / "warm-up.json").write_text(json.dumps(warm, indent=2))
        print(f"faults: warm-up {warm['seconds']} s ({'steady' if warm['steady'] else 'NOT steady'}): "
              f"answers {warm['statuses']}, freshness p95 {warm['freshness_p95_s']} s", flush=True)
    for name in args.scenario.split(","):
        result = asyncio.run(run_one(name, args.after, settings, layout))
        (out / f"{name}.json").write_text(json.dumps(result, indent=2))
        rows.append(row(result))
        if "lost_hide" in result:
            print(f"faults: lost-hide: {json.dumps(result['lost_hide'])}", flush=True)
        ok = ok and _verdict(result) == "ok" and not result["server_errors_other_than_503"]
        print(rows[-1], flush=True)
        if _verdict(result) != "ok":
            # CI keeps only the output: what the checker found, not just how many.
            found = {k: v for k, v in result["verdict"].get("examples", {}).items() if v}
            print(f"faults: {name}: examples {json.dumps(found)}", flush=True)
    print("| scenario | faults | acked writes | lost / duplicated / wrongly visible "
          "| shown after ack | stream: "
          "silent gaps | rows never sent to Kafka / acked records missing | follower / like drift "
          "| API during the fault | max freshness during | lag back to pre-fault level after the "
          "lift | lag zero after the load stops | alert | verdict |")
    print("| --- | ---: | ---: | --- | --- | ---: | --- | --- | --- | ---: | ---: | ---: | --- | --- |")
    print("\n".join(rows))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
