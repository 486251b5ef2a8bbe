"""Turn one benchmark result (a JSON-able dict) into a Markdown report and PNG plots."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def _ratio(a: float | None, b: float | None) -> str:
    if not a or not b:
        return "n/a"
    return f"{a / b:.3f}"


def markdown(r: dict[str, Any]) -> str:
    m = r["meta"]
    lines = [f"# Benchmark ({m['mode']}) — {m['date']}", "",
             f"Machine: {m['machine']}. Graph: {m['graph']}. Everything below was measured in "
             f"one run on the local stack: the Kafka produce and pgoutput decode baselines before "
             f"the services started, the raw Cassandra writer and the contract's floor after the "
             f"history was taken in, with the services running and idle. Ratios and verdicts are computed from the "
             f"measured values; compare the ratios, not absolute times.", ""]
    lines += ["## Headline", "", "| figure | ours | baseline | ratio (computed) | target | verdict (computed) |",
              "| --- | --- | --- | --- | --- | --- |"]
    for row in r["headline"]:
        lines.append(f"| {row['figure']} | {row['ours']} | {row['baseline']} | {row['ratio']} | "
                     f"{row['target']} | {row.get('verdict', 'n/a')} |")
    cpu = "server CPU-s per 1,000 pages (computed)"
    lines += ["", "## Feed reads (latency as the load generator measured it, ms)", "",
              "| readers (avg follows) | page | connections | pages/s | p50 | p95 | p99 | errors | "
              "server CPU-s / 1,000 pages (computed) | load generator |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for row in r["reads"]:
        lines.append(f"| {row['group']} ({row['avg_follows']}) | {row['page']} | {row['concurrency']} | "
                     f"{row['per_s']} | {row['p50_ms']} | {row['p95_ms']} | {row['p99_ms']} | "
                     f"{row['errors']} | {row.get(cpu, 'n/a')} | {row.get('load generator', 'python')} |")
    lines += ["", "## Baselines at the same connections (ms)", "",
              "| baseline | connections | req/s | p50 | p95 | p99 | server CPU-s / 1,000 (computed) |",
              "| --- | --- | --- | --- | --- | --- | --- |"]
    for row in r["baselines"]:
        lines.append(f"| {row['name']} | {row['concurrency']} | {row['per_s']} | {row['p50_ms']} | "
                     f"{row['p95_ms']} | {row['p99_ms']} | {row.get(cpu, 'n/a')} |")
    f = r["freshness"]
    lines += ["", "## Freshness (commit → `new_item` on a follower's open stream, via the API)", "",
              f"{f['posts']} posts at {r['meta']['post_rate']}/s; observed {f['observed']}, "
              f"missed within 30 s: {f['missed_30s']}. p50 {f['p50_s']} s, p95 {f['p95_s']} s, "
              f"p99 {f['p99_s']} s (target p95 ≤ 1.5 s; the specification allows 30 s)."]
    mix = r.get("mix")
    if mix:
        rd = mix["reads"]
        lines += ["", "## The target mix, open loop: ~1,000 feed pages per post", "",
                  f"wrk (C) pages first pages of {rd['connections']} connections' readers for the whole "
                  f"phase; posts by ordinary authors at a fixed {mix['post rate (/s, set from the probe)']}/s "
                  f"(set from {mix['calibration pages/s (the whole mix)']} pages/s in an unrecorded run of the "
                  f"same mix), whatever the "
                  f"reads do, while a follower of each author holds the stream open and polls its first "
                  f"page (latest order). {rd['pages']} pages ({rd['pages/s']}/s, {rd['non_2xx']} non-2xx) "
                  f"and {mix['posts']} posts: {mix['pages per post (computed)']} pages per post (computed).",
                  "", f"- pages: p50 {rd['p50_ms']} ms, p95 {rd['p95_ms']} ms, p99 {rd['p99_ms']} ms"]
        for label in ("announced on the stream", "on the follower's first page"):
            v = mix[label]
            lines.append(f"- commit → {label}: observed {v['observed']}, missed {v['missed_30s']}; "
                         f"p50 {v['p50_s']} s, p95 {v['p95_s']} s, max {v['max_s']} s")
        if mix["missed"]["stream"] or mix["missed"]["first page"]:
            lines.append(f"- **MISSED**: {mix['missed']} (the run failed)")
    ia = r.get("inactive")
    if ia:
        lines += ["", "## Inactive readers (no feed read for 14 days: no inbox rows)", "",
                  "Each user's last read set from the graph's activity distribution (written as the "
                  "API would have written it then), the fan-out's sweeper run once, then the history "
                  "taken in: the rows not written are the fan-out's own counter. Returning readers "
                  "open their feed one at a time, beside active readers the API has not seen either.",
                  ""]
        for k, v in ia.items():
            if isinstance(v, dict):
                lines.append(f"- {k}:")
                lines += [f"  - {kk}: {vv}" for kk, vv in v.items()]
            else:
                lines.append(f"- {k}: {v}")
    la = r.get("largest_authors")
    if la:
        lines += ["", "## Largest authors: hybrid against pure fan-out-on-write", "",
                  "One post each, alone; its last follower by id (the fan-out's last page) holds the "
                  "realtime stream open. Pure push = the fan-out restarted with every author ordinary.", "",
                  "| author | followers | hybrid: visible (s) | push: visible (s) | push: every row written (s) "
                  "| push: inbox rows |", "| --- | --- | --- | --- | --- | --- |"]
        for h, p in zip(la["hybrid"], la["push"]):
            lines.append(f"| {h['author']} | {h['followers']:,} | {h['visible_s']} | {p['visible_s']} | "
                         f"{p['fanout_s']} | {p['inbox_rows']:,} |")
    lines += ["", "## Fan-out and ingest", ""]
    for k, v in r["fanout"].items():
        lines.append(f"- {k}: {v}")
    costs = r.get("costs")
    if costs:
        lines += ["", "## Costs per unit of work (the capacity model's inputs: `python -m bench.run.capacity`)", ""]
        for phase, figures in costs.items():
            for k, v in figures.items():
                if k != "window":
                    lines.append(f"- {phase}: {k}: {v}")
            lines.append(f"- {phase}: CPU over the window: {figures.get('window')}")
    st = r.get("streams")
    if st:
        lines += ["", "## Streams at scale (`bench/run/streams_at_scale.py`)", ""]
        lines += [f"- {k}: {v}" for k, v in st.items()]
    lines += ["", "## Raw rates measured in the same run", ""]
    for k, v in r["raw"].items():
        if k not in ("cassandra", "floor"):
            lines.append(f"- {k}: {v}")
    cass = r["raw"].get("cassandra")
    if cass:
        lines += ["", f"Best raw Cassandra writer (`bench/fanout/raw_writer.py`): {cass['rows']:,} of the "
                      f"history's (reader, post) rows over {cass['readers (partitions)']:,} partitions, "
                      f"TTL {cass['ttl_s']} s, each setting after a warm-up pass:", "",
                  "| strategy | rows a request (at most) | in flight | seconds | rows/s | client µs/row | Cassandra µs/row |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for t in cass["tried"]:
            lines.append(f"| {t['strategy']} | {t['rows per request (at most)']} | {t['in flight']} | "
                         f"{t['seconds']} | {t['rows/s']:,} | {t.get('client CPU µs per row (computed)')} | "
                         f"{t.get('Cassandra CPU µs per row (computed)')} |")
    floor = r["raw"].get("floor")
    if floor:
        lines += ["", "The contract's floor (`bench/fanout/floor.py`) on the same posts: their "
                      "followers read from the fan-out's `followers`, one row each written, one "
                      "author event produced per post; best setting per step (CPU per row computed):", "",
                  "| step | posts in flight | rows | seconds | rows/s | client µs/row | Cassandra µs/row | Kafka µs/row |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for t in floor["steps"].values():
            lines.append(f"| {t['step']} | {t['posts in flight']} | {t['rows']:,} | {t['seconds']} | "
                         f"{t['rows/s']:,} | {t['client CPU µs per row (computed)']} | "
                         f"{t['Cassandra CPU µs per row (computed)']} | {t['Kafka CPU µs per row (computed)']} |")
    if r.get("ids"):
        lines += ["", "## Ids", ""]
        for k, v in r["ids"].items():
            lines.append(f"- {k}: {v}")
    lines += ["", "Plots: " + ", ".join(f"`{p}`" for p in r.get("plots", [])), ""]
    return "\n".join(lines)


def plots(r: dict[str, Any], out: Path) -> list[str]:
    names: list[str] = []
    if r.get("latency_samples"):  # Python-driven reads only: wrk reports quantiles, no samples
        names += _latency_cdf(r, out)
    return names + _other_plots(r, out)


def _latency_cdf(r: dict[str, Any], out: Path) -> list[str]:
    names = []
    fig, ax = plt.subplots(figsize=(8, 4.5))
    # One colour per series (group and page, or baseline), one line style per concurrency:
    # more than ten series would otherwise reuse colours and read as each other.
    kinds: dict[str, str] = {}
    styles = {"c1": "-", "c4": "--", "c8": "--", "c16": ":"}
    for group, series in r.get("latency_samples", {}).items():
        data = sorted(series)
        kind, _, level = group.rpartition(" ")
        colour = kinds.setdefault(kind, f"C{len(kinds) % 10}")
        if data:
            ax.plot([x * 1000 for x in data], [i / len(data) for i in range(len(data))], label=group,
                    color=colour, linestyle=styles.get(level, "-."))
    ax.set_xscale("log")
    ax.set_xlabel("latency (ms, log)")
    ax.set_ylabel("fraction of requests")
    ax.set_title("Feed page latency distribution vs baselines")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "latency_cdf.png", dpi=110)
    plt.close(fig)
    names.append("latency_cdf.png")
    return names


def _other_plots(r: dict[str, Any], out: Path) -> list[str]:
    names: list[str] = []
    series = r["freshness"].get("series", [])
    if series:
        fig, ax = plt.subplots(figsize=(8, 4))
        ax.scatter([t for t, _ in series], [v for _, v in series], s=8)
        ax.axhline(1.5, color="red", linestyle="--", label="target p95 1.5 s")
        ax.set_xlabel("seconds into the steady post phase")
        ax.set_ylabel("commit → visible (s)")
        ax.set_title("Freshness over time")
        ax.legend()
        ax.grid(True, alpha=0.3)
        fig.tight_layout()
        fig.savefig(out / "freshness.png", dpi=110)
        plt.close(fig)
        names.append("freshness.png")

    samples = r.get("lag_samples", [])
    if samples:
        fig, ax1 = plt.subplots(figsize=(8, 4))
        t = [s["t"] for s in samples]
        ax1.plot(t, [s["fanout_lag"] for s in samples], label="fan-out consumer lag (msgs)")
        ax1.plot(t, [s["ranker_lag"] for s in samples], label="ranker consumer lag (msgs)")
        ax1.set_xlabel("seconds into the run")
        ax1.set_ylabel("messages")
        ax2 = ax1.twinx()
        ax2.plot(t, [s["cdc_lag_bytes"] / 1e6 for s in samples], color="gray", linestyle=":",
                 label="CDC slot lag (MB)")
        ax2.set_ylabel("MB")
        ax1.legend(loc="upper left", fontsize=8)
        ax2.legend(loc="upper right", fontsize=8)
        ax1.set_title("Lag over the run")
        fig.tight_layout()
        fig.savefig(out / "lag.png", dpi=110)
        plt.close(fig)
        names.append("lag.png")
    return names


def write(r: dict[str, Any], out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    r["plots"] = plots(r, out)
    slim = {k: v for k, v in r.items() if k != "latency_samples"}
    (out / "result.json").write_text(json.dumps(slim, indent=2, default=str))
    (out / "report.md").write_text(markdown(r))
    return out / "report.md"
