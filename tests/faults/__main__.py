"""``make faults``: fault scenarios on the three-node stack, under a steady API workload.

    python -m tests.faults [--scenario cassandra-kill,...] [--after 30] [--out DIR]

Needs the three-node stack with migrations and services running (``make faults`` does
all of it). Per scenario: set-up (fresh users and follows), the workload with the fault injected after a
warm-up, lifted after its hold time, and ``--after`` seconds of load past the lift, then
settling (the fan-out and ranker groups' lag back to zero), then the checker
(``checker.py``). Writes ``<out>/<scenario>.json`` and prints one report row per
scenario; exits 1 when a target is missed (docs/reliability.md lists them).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from deploy.stack.layout import REPO, Layout
from services.common.settings import Settings, get_settings

from .checker import check
from .injectors import HOLD_S, SCENARIOS, FaultLog, scenario
from .workload import Workload

SETTLE_LIMIT_S = 240
WARMUP_S = 20.0


def _settings() -> Settings:
    os.environ.setdefault("FEED_DEV_MODE", "true")
    Layout.from_env().use_as_default()
    return get_settings()


class LagWatch:
    """The fan-out's and the ranker's total consumer lag, sampled every second."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.samples: list[tuple[float, int | None]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        prefix = settings.topic_prefix
        self.groups = {settings.fanout_group_id or f"{prefix}.fanout",
                       settings.ranker_group_id or f"{prefix}.ranker"}

    def _run(self) -> None:
        from deploy.lag import kafka_lag
        while not self._stop.is_set():
            try:
                lag = sum(r["lag"] for r in kafka_lag(self.settings) if r["group"] in self.groups)
            except Exception:  # noqa: BLE001 - a broker down: unknown, not zero
                lag = None
            self.samples.append((time.time(), lag))
            self._stop.wait(1.0)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=15)

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
        started = time.time()
        await w.run(after_s, scenario(name, WARMUP_S, HOLD_S[name], log, layout))
        load_ended = time.time()
        # Settle: lag back to zero (measured from when the fault was lifted), then the
        # notices and snapshots a few seconds more.
        deadline = time.time() + SETTLE_LIMIT_S
        while time.time() < deadline and lag.zero_after(time.time() - 1.5) is None:
            await asyncio.sleep(1)
        await asyncio.sleep(5)
        lag.stop()
        verdict = await check(settings, w)
    finally:
        await w.close()
    fresh_during = [s for at, s in w.ledger.freshness_s if log.started_at <= at <= log.lifted_at + 5]
    fresh_all = sorted(s for _, s in w.ledger.freshness_s)
    during = w.ledger.statuses["during"]
    # Failed requests: 5xx (503 included) and transport errors; 4xx are the workload's own.
    reads_failed = sum(n for code, n in during.items() if not code.isdigit() or code.startswith("5"))
    result = {
        "scenario": name, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "machine": {"cores": os.cpu_count(), "nodes": layout.nodes},
        "seconds": round(time.time() - started, 1),
        "faults": log.injected, "verdict": verdict.as_dict(), "ok": verdict.ok(),
        "statuses": {k: dict(v) for k, v in w.ledger.statuses.items()},
        "non_2xx_during": reads_failed, "requests_during": sum(during.values()),
        "server_errors_other_than_503": sum(n for p in w.ledger.statuses.values() for code, n in p.items()
                                            if code.startswith("5") and code != "503"),
        "freshness_max_during_s": round(max(fresh_during), 2) if fresh_during else None,
        "freshness_p95_s": round(fresh_all[int(0.95 * (len(fresh_all) - 1))], 2) if fresh_all else None,
        "lag_recovered_after_lift_s": lag.recovered_after(log.started_at, log.lifted_at),
        "lag_zero_after_load_s": lag.zero_after(load_ended), "max_lag": lag.max_lag(),
        "lag_samples": [(round(at - started, 1), n) for at, n in lag.samples],
        "stream": stream_summary(w),
    }
    return result


def stream_summary(w: Workload) -> dict[str, Any]:
    """The watcher's stream: connections, events by kind, and ack-to-announcement seconds."""
    led = w.ledger
    kinds = Counter(kind for _, kind, _ in led.stream)
    delays = sorted(at - led.posts[post][1] for at, kind, post in led.stream
                    if kind == "new_item" and post in led.posts)
    return {"connections": len(led.stream_opened), "statuses": dict(led.stream_statuses),
            "events": dict(kinds),
            "announce_p95_s": round(delays[int(0.95 * (len(delays) - 1))], 2) if delays else None,
            "announce_max_s": round(delays[-1], 2) if delays else None}


def row(r: dict[str, Any]) -> str:
    v = r["verdict"]
    share = (r["non_2xx_during"] / r["requests_during"] * 100) if r["requests_during"] else 0.0
    cdc = ("not traced" if v.get("cdc_unsent") is None
           else f"{v['cdc_unsent']} / {v['kafka_lost']}")
    return (f"| {r['scenario']} | {len(r['faults'])} | {v['acked_writes']} | {v['lost_writes'] + v['feed_lost']} "
            f"/ {v['feed_duplicated']} / {v['wrongly_visible']} | {v.get('stream_gaps', 0)} | {cdc} "
            f"| {v['follower_drift']} / {v['like_drift']} "
            f"| {r['requests_during']} requests, {share:.1f}% failed, "
            f"{r['server_errors_other_than_503']} 5xx other than 503 | {r['freshness_max_during_s']} s "
            f"| {r['lag_recovered_after_lift_s']} s | {r['lag_zero_after_load_s']} s "
            f"| {_verdict(r)} |")


def _verdict(r: dict[str, Any]) -> str:
    if r["ok"]:
        return "ok"
    over = r["verdict"].get("readers_over_cap")
    return f"INCONCLUSIVE ({over} readers owed more than the inbox cap keeps)" if over else "MISSED"



def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.faults", description=__doc__)
    parser.add_argument("--scenario", default=",".join(SCENARIOS))
    parser.add_argument("--after", type=float, default=30.0, help="seconds of load after the lift")
    parser.add_argument("--out", default=str(REPO / "bench" / "out" / "faults"))
    args = parser.parse_args(argv)
    settings = _settings()
    layout = Layout.from_env()
    if layout.nodes != 3:
        print("faults: the three-node stack is not running (make faults starts it)", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows, ok = [], True
    for name in args.scenario.split(","):
        result = asyncio.run(run_one(name, args.after, settings, layout))
        (out / f"{name}.json").write_text(json.dumps(result, indent=2))
        rows.append(row(result))
        ok = ok and result["ok"] and not result["server_errors_other_than_503"]
        print(rows[-1], flush=True)
    print("| scenario | faults | acked writes | lost / duplicated / wrongly visible | stream: "
          "silent gaps | rows never sent to Kafka / acked records missing | follower / like drift "
          "| API during the fault | max freshness during | lag back to pre-fault level after the "
          "lift | lag zero after the load stops | verdict |")
    print("| --- | ---: | ---: | --- | ---: | --- | --- | --- | ---: | ---: | ---: | --- |")
    print("\n".join(rows))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
