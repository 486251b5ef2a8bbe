"""Goodput of a backlog drain: events the workers applied in every 5 s window, until lag 0.

    .venv/bin/python -m bench.run.drain [--out FILE.json] [--timeout-s 1800]
    .venv/bin/python -m bench.run.drain --plot OUT.svg RUN.json [RUN.json ...]

Run it beside ``make run`` (or ``make run NODES=3``) on a fresh stack (``make reset``):
it waits for the demo's backlog to appear, then samples every ``--every-s`` the workers'
own counters of messages handled (``feed_consumer_messages_total`` on the fan-out's and
the ranker's metrics ports: per message, not per committed batch) and the pipeline's lag
(``deploy.pipeline_progress``), until the lag has stayed 0 for ``--settle-s``. It prints
one line per window and a summary:

* drain: seconds from the first window with a backlog to lag 0;
* goodput: events whose last step is done (``LAST_STEPS``: a follow or a like once its
  count is written), per window; the peak window, and the longest stretch below 30 % of
  the peak while a backlog remained (the target: never more than 30 s); every topic's
  messages handled per window too;
* follows/s: follows applied over the seconds the follows topic took to drain, the figure
  compared between one node and three (same demo, same machine, one after the other);
* the streams' side: records added to the topics every API process reads in
  full (``author-events``, and ``inbox-events`` where a stack still has it) over the run,
  and the API service's CPU-seconds (its process tree, from /proc).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from deploy.pipeline_progress import PipelineOffsets
from services.shared.clients import kafka
from services.shared.settings import Settings, get_settings

COLLAPSE_SHARE = 0.3
COLLAPSE_LIMIT_S = 30.0
# Goodput counts an event once, when its last step is done: a post, a block, a rank move
# or feature event when handled; a follow or a like when its count's owner applied it
# (follow-counts, like-counts). The CDC follows and likes topics are a first step of the
# same events, counted under "handled" only.
LAST_STEPS = ("public.posts", "public.blocks", "rank-key-moves", "rank-features", "follow-counts",
              "like-counts")


@dataclass(frozen=True)
class Sample:
    at: float
    handled: dict[str, float]   # topic suffix -> messages handled so far (ok + dead letters)
    lag: int | None


def _suffix(topic: str, prefix: str) -> str:
    return topic[len(prefix) + 1:] if topic.startswith(prefix + ".") else topic


def handled(settings: Settings) -> dict[str, float]:
    """Messages the fan-out and the ranker handled so far, per topic, over every worker
    of each (0 for a worker not answering: it restarted, and its counters restart with it)."""
    from deploy.services import worker_ports
    from deploy.stack.layout import Layout

    out: dict[str, float] = {}
    ports = worker_ports(settings, Layout.from_env())
    for port in ports["fanout"] + ports["ranker"]:
        try:
            text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=3).text
        except httpx.HTTPError:
            continue
        for family in text_string_to_metric_families(text):
            if family.name != "feed_consumer_messages":
                continue
            for s in family.samples:
                if s.name.endswith("_total") and s.labels.get("outcome") in ("ok", "dead_letter"):
                    topic = _suffix(s.labels["topic"], settings.topic_prefix)
                    out[topic] = out.get(topic, 0.0) + s.value
    return out


STREAM_TOPICS = ("author-events", "inbox-events")


def stream_records(settings: Settings) -> int:
    """Records in the topics each API process's stream consumer reads whole (no group):
    the sum of their partitions' end offsets (a topic this stack lacks counts 0)."""
    from confluent_kafka import TopicPartition

    consumer = kafka.consumer(settings, {"group.id": "bench-drain"})
    try:
        listed = consumer.list_topics(timeout=10).topics
        total = 0
        for suffix in STREAM_TOPICS:
            topic = f"{settings.topic_prefix}.{suffix}"
            for p in (listed[topic].partitions if topic in listed else {}):
                total += consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
        return total
    finally:
        consumer.close()


def api_cpu_s() -> float | None:
    """CPU-seconds of the API service's process tree (None when it is not running)."""
    from bench.harness.wrk_load import tree_cpu_s
    from deploy.services import daemon
    from deploy.stack.layout import Layout

    pid = daemon(Layout.from_env(), "api").pid()
    return tree_cpu_s(pid) if pid else None


def windows(samples: list[Sample]) -> list[dict[str, Any]]:
    """Per window: seconds since the first sample, events/s per topic and in all, lag."""
    out = []
    t0 = samples[0].at
    for a, b in zip(samples, samples[1:]):
        span = b.at - a.at
        rates = {t: max(0.0, b.handled.get(t, 0.0) - a.handled.get(t, 0.0)) / span
                 for t in set(a.handled) | set(b.handled)}
        out.append({"t": round(b.at - t0, 1), "rates": rates, "lag": b.lag,
                    "total": sum(r for t, r in rates.items() if t in LAST_STEPS),
                    "handled": sum(rates.values())})
    return out


def summary(ws: list[dict[str, Any]], every_s: float) -> dict[str, Any]:
    """The drain's length, peak, longest stretch below ``COLLAPSE_SHARE`` of the peak
    while a backlog remained, and follows/s over the follows topic's own drain."""
    draining = [w for w in ws if w["lag"]]
    peak = max((w["total"] for w in ws), default=0.0)
    longest = run = 0.0
    for w in ws:
        if w["lag"] and w["total"] < COLLAPSE_SHARE * peak:
            run += every_s
            longest = max(longest, run)
        else:
            run = 0.0
    follows = [w for w in ws if w["rates"].get("public.follows", 0) > 0]
    follows_applied = sum(w["rates"].get("public.follows", 0) * every_s for w in follows)
    follows_span = (follows[-1]["t"] - follows[0]["t"] + every_s) if follows else 0.0
    totals: dict[str, float] = {}
    for w in ws:
        for t, r in w["rates"].items():
            totals[t] = totals.get(t, 0.0) + r * every_s
    return {
        "drain_s": (draining[-1]["t"] - draining[0]["t"] + every_s) if draining else 0.0,
        "peak_goodput_per_s": round(peak, 1),
        "longest_below_30pct_s": longest,
        "collapsed": longest > COLLAPSE_LIMIT_S,
        "follows_per_s": round(follows_applied / follows_span, 1) if follows_span else 0.0,
        "follows_applied": round(follows_applied),
        "applied": {t: round(n) for t, n in sorted(totals.items())},
    }


COLORS = ("#c0392b", "#2471a3", "#1e8449", "#7d3c98")


def plot(runs: list[tuple[str, list[dict[str, Any]]]], width: int = 900, height: int = 300) -> str:
    """An SVG of goodput per window (events/s) against seconds, one line per run."""
    pad = 40
    t_max = max((w["t"] for _, ws in runs for w in ws), default=1.0) or 1.0
    g_max = max((w["total"] for _, ws in runs for w in ws), default=1.0) or 1.0

    def xy(w: dict[str, Any]) -> str:
        x = pad + (width - 2 * pad) * w["t"] / t_max
        y = height - pad - (height - 2 * pad) * w["total"] / g_max
        return f"{x:.1f},{y:.1f}"
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-size="12">',
             f'<line x1="{pad}" y1="{height - pad}" x2="{width - pad}" y2="{height - pad}" stroke="black"/>',
             f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{height - pad}" stroke="black"/>',
             f'<text x="{width / 2}" y="{height - 8}">seconds from the first window with a backlog '
             f'(0-{t_max:.0f})</text>',
             f'<text x="4" y="{pad - 8}">goodput, events/s (0-{g_max:.0f})</text>']
    for i, (label, ws) in enumerate(runs):
        color = COLORS[i % len(COLORS)]
        parts.append(f'<polyline fill="none" stroke="{color}" points="{" ".join(xy(w) for w in ws)}"/>')
        parts.append(f'<text x="{width - pad - 260}" y="{pad + 16 * i}" fill="{color}">{label}</text>')
    return "\n".join(parts + ["</svg>"]) + "\n"


def main(argv: list[str] | None = None) -> int:
    args_in = sys.argv[1:] if argv is None else argv
    if args_in[:1] == ["--plot"]:
        out, files = args_in[1], args_in[2:]
        runs = [(f.rsplit("/", 1)[-1].removesuffix(".json"), json.load(open(f))["windows"]) for f in files]
        with open(out, "w") as f:
            f.write(plot(runs))
        return 0
    ap = argparse.ArgumentParser(prog="python -m bench.run.drain", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--every-s", type=float, default=5.0)
    ap.add_argument("--settle-s", type=float, default=30.0)
    ap.add_argument("--timeout-s", type=float, default=1800.0)
    ap.add_argument("--out", help="write the windows and the summary as JSON here")
    args = ap.parse_args(argv)
    settings = get_settings()
    deadline = time.monotonic() + args.timeout_s
    offsets, records_before = None, None
    while offsets is None or records_before is None:  # the stack may still be starting
        try:
            offsets = offsets or PipelineOffsets(settings, timeout_s=4.0)
            records_before = stream_records(settings)
        except Exception:  # noqa: BLE001
            if time.monotonic() > deadline:
                raise
            time.sleep(args.every_s)
    samples: list[Sample] = []
    seen_backlog, quiet_since = False, None
    cpu_before = api_cpu_s() or 0.0  # not started yet: its whole life is the run's
    try:
        while time.monotonic() < deadline:
            try:
                lag: int | None = offsets.read().lag
            except Exception:  # noqa: BLE001 - a broker or coordinator away: unknown
                lag = None
            now = time.time()
            samples.append(Sample(now, handled(settings), lag))
            if lag:
                seen_backlog, quiet_since = True, None
            elif lag == 0 and seen_backlog:
                quiet_since = quiet_since or now
                if now - quiet_since >= args.settle_s:
                    break
            if len(samples) > 1:
                w = windows(samples[-2:])[0]
                top = sorted(w["rates"].items(), key=lambda kv: -kv[1])[:4]
                print(f"drain: t={now - samples[0].at:7.1f}s lag={lag!s:>7} "
                      f"goodput/s={w['total']:7.1f}  " + " ".join(f"{t}={r:.0f}" for t, r in top if r),
                      flush=True)
            time.sleep(max(0.0, args.every_s - (time.time() - now)))
    finally:
        offsets.close()
    if not seen_backlog:
        print("drain: no backlog seen", file=sys.stderr)
        return 1
    # Only the windows from the first one with a backlog on.
    first = next(i for i, s in enumerate(samples) if s.lag)
    ws = windows(samples[max(0, first - 1):])
    result = summary(ws, args.every_s)
    cpu_after = api_cpu_s()
    result["streams"] = {
        "records each API process read": stream_records(settings) - records_before,
        "API CPU-s (all its processes)": (round(cpu_after - cpu_before, 1)
                                          if cpu_after is not None else None)}
    print("drain: " + json.dumps(result))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"summary": result, "windows": ws}, f, indent=1)
    return 0 if quiet_since is not None else 2


if __name__ == "__main__":
    sys.exit(main())
