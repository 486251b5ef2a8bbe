"""The relay against real Debezium 3.6 (Kafka Connect standalone, as ``make
debezium-check`` runs it), one after the other on the same backlog and the same steady
insert rate, with a client-side decode ceiling.

    .venv/bin/python -m bench.cdc.debezium [--backlog 100000] [--rate 200] [--seconds 15]
        [--out DIR]

On a scratch database: the relay, Debezium with its defaults, and Debezium tuned for
latency (``poll.interval.ms`` 10 instead of 500) each start once on the empty tables
(their slot and snapshot made), then stop; one more slot is made for ``pg_recvlogical``.
Then, for each in turn:

1. backlog: ``--backlog`` posts in transactions of 100, written while nothing captures.
   Each capturer is started alone on it: events/s from its start to the last record in
   its posts topic (end offsets polled), and its process tree's CPU-seconds per 10,000
   events. ``pg_recvlogical`` reads the same backlog from its own slot to the WAL end
   (pgoutput, output to /dev/null): the ceiling of any client of this server.
2. steady: ``--rate`` single-row inserts a second for ``--seconds``, captured by one
   capturer at a time; commit → topic latency per record = the consumer's receive time
   minus ``source.ts_ms`` (the commit time), p50/p95/p99, same consumer for both.

Both capture every table of the publication; the backlog and the steady inserts are posts.
Prints a report and writes ``result.json`` (and ``report.md``) to ``--out``.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from confluent_kafka import Consumer, TopicPartition

from bench.cdc.relay import POST_BODY, _insert_backlog
from bench.harness.verdicts import verdict
from bench.harness.wrk_load import tree_cpu_s
from deploy.debezium.check import Scratch, stop
from deploy.stack.toolchain import PG_BIN
from services.shared.clients import kafka, pg
from services.shared.contracts.topics import cdc_topic
from services.shared.settings import Settings

TX_ROWS = 100


def quantile(values: list[float], q: float) -> float | None:
    v = sorted(values)
    return round(v[min(len(v) - 1, int(q * len(v)))], 1) if v else None


class Capturer:
    """One CDC process (the relay or Kafka Connect with Debezium) on the scratch database."""

    def __init__(self, name: str, prefix: str, start: Callable[[], subprocess.Popen]) -> None:
        self.name, self.prefix, self._start = name, prefix, start
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.proc = self._start()

    def stop(self) -> None:
        if self.proc is not None:
            stop(self.proc)
        self.proc = None

    def cpu_s(self) -> float:
        return tree_cpu_s(self.proc.pid) if self.proc else 0.0


def end_offsets(consumer: Consumer, topic: str) -> int:
    meta = consumer.list_topics(topic, timeout=10).topics[topic]
    total = 0
    for p in meta.partitions:
        _lo, hi = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
        total += hi
    return total


def wait_for(consumer: Consumer, topic: str, count: int, timeout: float) -> float:
    """Seconds until ``topic`` holds ``count`` records (polled every 50 ms)."""
    started = time.perf_counter()
    while end_offsets(consumer, topic) < count:
        if time.perf_counter() - started > timeout:
            raise SystemExit(f"bench: {topic}: fewer than {count} records after {timeout:.0f} s")
        time.sleep(0.05)
    return time.perf_counter() - started


def steady(s: Settings, cap: Capturer, rate: float, seconds: float, first_id: int) -> dict[str, Any]:
    """Single-row inserts at ``rate``/s; commit → topic (receive time − source.ts_ms)."""
    topic = cdc_topic("posts", cap.prefix)
    consumer = kafka.consumer(s, {"group.id": str(uuid.uuid4()),
                                  "enable.auto.commit": False, "fetch.wait.max.ms": 10})
    # From each partition's end now: every record of the phase is read, none before it.
    parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    consumer.assign([TopicPartition(topic, p, consumer.get_watermark_offsets(
        TopicPartition(topic, p), timeout=10)[1]) for p in parts])
    wanted = {first_id + i for i in range(int(rate * seconds))}
    lat: dict[int, float] = {}
    cpu0 = cap.cpu_s()
    with pg.connect(s, autocommit=True) as conn:
        t0 = time.perf_counter()
        for i, post_id in enumerate(sorted(wanted)):
            while time.perf_counter() < t0 + i / rate:
                for m in consumer.consume(100, max(0.0, min(0.01, t0 + i / rate - time.perf_counter()))):
                    _record(m, lat)
            conn.execute("INSERT INTO posts (post_id, author_id, created_at, text) VALUES (%s, 1, now(), %s)",
                         (post_id, POST_BODY))
    deadline = time.monotonic() + 30
    while not wanted <= lat.keys() and time.monotonic() < deadline:
        for m in consumer.consume(100, 0.1):
            _record(m, lat)
    cpu = cap.cpu_s() - cpu0
    consumer.close()
    values = [lat[k] for k in wanted if k in lat]
    return {"inserts": len(wanted), "seen": len(values), "rate": rate,
            "commit_to_topic_ms": {"p50": quantile(values, 0.5), "p95": quantile(values, 0.95),
                                   "p99": quantile(values, 0.99), "max": round(max(values), 1) if values else None},
            "cpu_s_per_10k_events (computed)": round(cpu / max(1, len(values)) * 10_000, 2)}


def _record(m: Any, lat: dict[int, float]) -> None:
    if m.error() or not m.value():
        return
    now_ms = time.time() * 1000
    v = json.loads(m.value())
    after = v.get("after") or {}
    if v.get("op") == "c" and "post_id" in after:
        lat.setdefault(int(after["post_id"]), now_ms - v["source"]["ts_ms"])


def recvlogical_ceiling(s: Settings, slot: str, publication: str) -> float:
    """Seconds for pg_recvlogical to read its slot to the current WAL end."""
    with pg.connect(s, autocommit=True) as conn:
        endpos = conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
    dsn = pg.conninfo(s)  # the settings' credentials and TLS, for pg_recvlogical
    started = time.perf_counter()
    subprocess.run([str(PG_BIN / "pg_recvlogical"), "-d", dsn, "--slot", slot, "--start",
                    f"--endpos={endpos}", "-o", "proto_version=1", "-o", f"publication_names={publication}",
                    "--no-loop", "-f", "/dev/null"], check=True, capture_output=True, timeout=600)
    return time.perf_counter() - started


def run(args: argparse.Namespace) -> dict[str, Any]:
    scratch = Scratch("cdc_bench", ("dbz", "dbzt"))
    relay_s = scratch.relay
    with pg.connect(relay_s, autocommit=True) as conn:
        conn.execute("INSERT INTO users (user_id) VALUES (1)")
    relay = Capturer("relay", relay_s.topic_prefix, scratch.start_relay)

    def debezium_capturer(name: str, suffix: str, extra: str) -> Capturer:
        """The check's connector under its own name, slot, prefix and offsets file,
        keeping its slot across restarts (the backlog waits in it)."""
        folder = scratch.connect_files(name, scratch.prefix(suffix), lambda c: c.replace(
            "slot.drop.on.stop=true", "slot.drop.on.stop=false").replace(
            "name=feed-debezium-check", f"name=feed-{name}") + extra)
        return Capturer(name, scratch.prefix(suffix), lambda: scratch.start_connect(folder))

    debezium = debezium_capturer("debezium", "dbz", "")
    # The strongest Debezium we could configure for latency: it polls its change queue
    # every 500 ms by default (poll.interval.ms); 10 ms here.
    tuned = debezium_capturer("debezium-tuned", "dbzt", "poll.interval.ms=10\n")
    db = scratch.db
    probe = kafka.consumer(scratch.base, {"group.id": f"{db}-probe"})
    out: dict[str, Any] = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                           "backlog": args.backlog, "tx_rows": TX_ROWS, "logs": str(scratch.work)}
    try:
        # Slots and snapshots first (the users row is each one's snapshot), then stopped.
        capturers = (relay, debezium, tuned)
        for cap in capturers:
            cap.start()
            wait_for(probe, cdc_topic("users", cap.prefix), 1, 240)
            time.sleep(2)  # the slot's position confirmed past the snapshot
            cap.stop()
        with pg.connect(relay_s, autocommit=True) as conn:
            conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (f"ceiling_{db}",))
        _insert_backlog(relay_s, args.backlog, 1_000_000, TX_ROWS)
        out["pg_recvlogical ceiling"] = {"seconds": round(s := recvlogical_ceiling(
            relay_s, f"ceiling_{db}", "dbz_pub"), 2), "events_per_s (computed)": round(args.backlog / s)}
        earlier = 0  # posts inserted by an earlier capturer's steady phase: in this one's slot too
        for cap in capturers:
            topic = cdc_topic("posts", cap.prefix)
            before = end_offsets(probe, topic)
            started = time.perf_counter()
            cap.start()
            wait_for(probe, topic, before + 1, 300)
            # From the first backlog record on: the capture itself, start-up left out.
            first_at, first_n, first_cpu = time.perf_counter(), end_offsets(probe, topic) - before, cap.cpu_s()
            wait_for(probe, topic, before + args.backlog, 900)
            done_at, done_cpu = time.perf_counter(), cap.cpu_s()
            streamed = args.backlog - first_n
            out[f"{cap.name} backlog"] = {
                "events_per_s (computed, from its first record)": round(streamed / (done_at - first_at)),
                "cpu_s_per_10k_events (computed, from its first record)":
                    round((done_cpu - first_cpu) / max(1, streamed) * 10_000, 2),
                "seconds from start to the last record (start-up included)": round(done_at - started, 2),
                "cpu_s from start to the last record": round(done_cpu, 2)}
            wait_for(probe, topic, before + args.backlog + earlier, 300)  # caught up
            out[f"{cap.name} steady"] = steady(relay_s, cap, args.rate, args.seconds,
                                               5_000_000 + 1_000_000 * capturers.index(cap))
            earlier += out[f"{cap.name} steady"]["inserts"]
            cap.stop()
    finally:
        for cap in (relay, debezium, tuned):
            cap.stop()
        probe.close()
        scratch.drop()
    rate = "events_per_s (computed, from its first record)"
    rb = out["relay backlog"][rate]
    best_backlog = max(out[f"{c} backlog"][rate] for c in ("debezium", "debezium-tuned"))
    p95 = {c: out[f"{c} steady"]["commit_to_topic_ms"]["p95"] for c in ("relay", "debezium", "debezium-tuned")}
    best_p95 = min(p95["debezium"], p95["debezium-tuned"])
    lost = {c: out[f"{c} steady"]["inserts"] - out[f"{c} steady"]["seen"] for c in ("relay", "debezium", "debezium-tuned")}
    out["targets (computed)"] = {
        "relay >= 1x the better Debezium's events/s on the backlog":
            f"{rb} / {best_backlog} = {rb / best_backlog:.2f}x: " + verdict(rb / best_backlog, ">=", 1.0),
        "relay commit -> topic p95 <= the better Debezium's":
            f"{p95['relay']} ms vs {best_p95} ms: " + verdict(p95["relay"], "<=", best_p95),
        "none missing in the steady phases": f"{lost}: " + verdict(max(lost.values()), "<=", 0)}
    return out


def markdown(r: dict[str, Any]) -> str:
    rate = "events_per_s (computed, from its first record)"
    cpu = "cpu_s_per_10k_events (computed, from its first record)"
    lines = [f"# CDC: the relay against Debezium 3.6, {r['date']}", "",
             f"`python -m bench.cdc.debezium`, one after the other on one machine (the stack's "
             f"Postgres and Kafka, 2 cores shared): a backlog of {r['backlog']:,} posts in "
             f"transactions of {r['tx_rows']}, then single-row inserts at a steady rate. Figures "
             f"marked computed are arithmetic on measured times and /proc CPU counters.", "",
             "| capturer | backlog events/s (computed, from its first record) | CPU-s per 10k events, backlog (computed) "
             "| start to last record (s) | steady: commit → topic p50 / p95 / p99 (ms) | steady: CPU-s per 10k events (computed) | steady: seen |",
             "| --- | ---: | ---: | ---: | --- | ---: | --- |"]
    for name in ("relay", "debezium", "debezium-tuned"):
        b, st = r[f"{name} backlog"], r[f"{name} steady"]
        c = st["commit_to_topic_ms"]
        lines.append(f"| {name} | {b[rate]:,} | {b[cpu]} | {b['seconds from start to the last record (start-up included)']} "
                     f"| {c['p50']} / {c['p95']} / {c['p99']} | {st['cpu_s_per_10k_events (computed)']} "
                     f"| {st['seen']} of {st['inserts']} at {st['rate']}/s |")
    ceiling = r["pg_recvlogical ceiling"]
    lines += ["", f"Client-side decode ceiling: `pg_recvlogical` (pgoutput, to /dev/null) read the same "
                  f"backlog in {ceiling['seconds']} s: {ceiling['events_per_s (computed)']:,} events/s (computed).",
              "", "Targets (computed):", ""]
    lines += [f"- {k}: {v}" for k, v in r["targets (computed)"].items()]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backlog", type=int, default=100_000)
    ap.add_argument("--rate", type=float, default=200.0)
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    result = run(args)
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "result.json").write_text(text + "\n")
        (args.out / "report.md").write_text(markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
