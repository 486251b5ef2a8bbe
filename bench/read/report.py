"""The read grid's report: JSON (every run), a Markdown table, ratios ours/pull, the
performance targets checked as met/missed, and a PNG of pages/s against history length.

Measured values come from wrk and /proc; everything derived from them (CPU per 1,000
pages, ratios, target verdicts) is labelled "computed". The pull baseline of a ratio is
the best pull query shape of the same cell, kind and connection count.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from bench.harness.wrk_load import store_cpu_total  # noqa: E402

# The read targets (docs/architecture.md, "What the specification fixes").
EMPTY_ENDPOINT_SHARE = 0.25      # feed pages/s at c16 >= 25 % of /healthz at c16
FIRST_P95_MS, NEXT_P95_MS = 30.0, 15.0   # small graph, c16
SMALL_GRAPH_RATIO, MONTH_RATIO = 1.0, 5.0  # ours / pull pages/s
MONTH_CELL = "h30-f500"          # "30 days of history and 500 follows"
# Ours, and ours with snapshot reuse off (services/api/feed/reuse.py), run by the grid on
# first pages only: its readers ask again and again with nothing changed in between,
# reuse's best case; REBUILD is the other bound, every first page built and stored.
# First pages of both are checked against the targets.
REBUILD = "ours-rebuild"
OURS = ("ours", REBUILD)


def _rebuilt(service: str) -> str:
    """What a verdict about ``service`` says of it (nothing for ours)."""
    return " [every first page built: reuse off]" if service == REBUILD else ""
FLAT_HISTORY_RATIO = 1.5         # 90-day first-page p95 within 1.5x of the 1-day p95


def per_1k(cpu_s: float, ok: int) -> float | None:
    return round(cpu_s / ok * 1000, 2) if ok else None


def best_pull(rows: list[dict], cell: str, kind: str, conns: int) -> dict | None:
    pulls = [r for r in rows if r["cell"] == cell and r["kind"] == kind
             and r["connections"] == conns and r["service"].startswith("pull")]
    return max(pulls, key=lambda r: r["pages_per_s"], default=None)


def find(rows: list[dict], cell: str, service: str, kind: str, conns: int) -> dict | None:
    return next((r for r in rows if r["cell"] == cell and r["service"] == service
                 and r["kind"] == kind and r["connections"] == conns), None)


def enrich(rows: list[dict]) -> None:
    """Add the computed columns to every row."""
    for r in rows:
        r["server_cpu_s_per_1k_pages"] = per_1k(r["server_cpu_s"], r["ok"])
        store = store_cpu_total(r["store_cpu_s"])
        if store is not None:
            background = sum(r["store_idle_cpu_per_s"].values()) * r["duration_s"]
            r["store_cpu_s_per_1k_pages"] = per_1k(store, r["ok"])
            r["store_cpu_s_per_1k_pages_net"] = per_1k(max(0.0, store - background), r["ok"])
        else:  # a store restarted during the run
            r["store_cpu_s_per_1k_pages"] = r["store_cpu_s_per_1k_pages_net"] = None
        if r["service"] in OURS and r["kind"] in ("first", "next"):
            pull = best_pull(rows, r["cell"], r["kind"], r["connections"])
            if pull and pull["pages_per_s"]:
                r["ratio_vs_pull"] = round(r["pages_per_s"] / pull["pages_per_s"], 2)
                r["p95_vs_pull"] = (round(r["p95_ms"] / pull["p95_ms"], 2)
                                    if r["p95_ms"] and pull["p95_ms"] else None)
                r["pull_baseline"] = pull["service"]


def markdown(rows: list[dict], meta: dict, verdicts: list[str]) -> str:
    lines = [f"# Read grid, {meta['started']}", "",
             f"wrk, {meta['duration_s']:g} s per run after {meta['warmup_s']:g} s of warm-up; "
             f"page limit 20; ours = `python -m services.api` (1 worker), pull = "
             f"`bench.read.pull_service` ({', '.join(meta['pull_shapes'])}); seeding: "
             f"`{json.dumps(meta['seeding'])}`; skipped cells: {meta['skipped'] or 'none'}.",
             "CPU-s/1k pages, ratios and verdicts are computed. Server CPU is the service's "
             "process tree. Store CPU is Postgres + Cassandra, which other work on this machine "
             "shares: shown as measured, then net of the background rate sampled for 1 s "
             "before the run (a rough estimate).", "",
             "| cell | kind | conns | service | pages/s | p50 ms | p95 ms | p99 ms | non-2xx (shed) "
             "| server CPU-s/1k (computed) | store CPU-s/1k, net of background (computed) "
             "| ours/pull pages/s (computed) |",
             "| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        ratio = r.get("ratio_vs_pull")
        vs = "" if ratio is None else f"{ratio:.2f}x vs {r['pull_baseline']}"
        lines.append(
            f"| {r['cell']} | {r['kind']} | {r['connections']} | {r['service']} | {r['pages_per_s']:.1f} "
            f"| {_fmt(r['p50_ms'], 1)} | {_fmt(r['p95_ms'], 1)} | {_fmt(r['p99_ms'], 1)} "
            f"| {r['non_2xx'] + r['socket_errors'] + r['timeouts']} ({r['shed']}) "
            f"| {_fmt(r['server_cpu_s_per_1k_pages'])} | {_fmt(r['store_cpu_s_per_1k_pages'])}, "
            f"{_fmt(r['store_cpu_s_per_1k_pages_net'])} "
            f"| {vs} |")
    lines += ["", "## First-page checks (computed)", "",
              "| cell | " + " | ".join(sorted({k for v in meta["checks"].values() for k in v})) + " |"]
    keys = sorted({k for v in meta["checks"].values() for k in v})
    lines.append("| --- |" + " ---: |" * len(keys))
    for cell, check in meta["checks"].items():
        lines.append(f"| {cell} | " + " | ".join(str(check.get(k, "")) for k in keys) + " |")
    lines += ["", "## Targets (computed)", ""] + [f"- {v}" for v in verdicts]
    return "\n".join(lines) + "\n"


def _fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def verdict(ok: bool | None, text: str) -> str:
    return f"{'n/a   ' if ok is None else 'MET   ' if ok else 'MISSED'} {text}"


def targets(rows: list[dict]) -> list[str]:
    out: list[str] = []
    # The empty endpoint, measured at the start and at the end: the higher is the bar.
    health = max((r for r in rows if r["kind"] == "healthz" and r["service"] == "ours"),
                 key=lambda r: r["pages_per_s"], default=None)
    feed16 = [r for r in rows if r["service"] == "ours" and r["connections"] == 16
              and r["kind"] in ("first", "next")]
    if health and feed16:
        for kind in ("first", "next"):
            kinds = [r for r in feed16 if r["kind"] == kind]
            worst = min(kinds, key=lambda r: r["pages_per_s"])
            small = next((r for r in kinds if r["cell"] == "small"), None)
            for label, r in (("small graph", small), ("worst cell " + worst["cell"], worst)):
                if r is not None:
                    share = r["pages_per_s"] / health["pages_per_s"]
                    out.append(verdict(share >= EMPTY_ENDPOINT_SHARE,
                                       f"{kind} pages/s c16 >= 25% of /healthz c16 ({label}): "
                                       f"{r['pages_per_s']:.0f} / {health['pages_per_s']:.0f} = {share:.0%}"))
        rebuilt = [r for r in rows if r["service"] == REBUILD and r["connections"] == 16
                   and r["kind"] == "first"]
        if rebuilt:
            worst = min(rebuilt, key=lambda r: r["pages_per_s"])
            share = worst["pages_per_s"] / health["pages_per_s"]
            out.append(verdict(share >= EMPTY_ENDPOINT_SHARE,
                               f"first pages/s c16 >= 25% of /healthz c16 (worst cell {worst['cell']})"
                               f"{_rebuilt(REBUILD)}: {worst['pages_per_s']:.0f} / {health['pages_per_s']:.0f}"
                               f" = {share:.0%}"))
    for kind, limit in (("first", FIRST_P95_MS), ("next", NEXT_P95_MS)):
        for service in OURS:
            r = find(rows, "small", service, kind, 16)
            if r is None and service == REBUILD:
                continue
            p95 = r["p95_ms"] if r else None
            got = f"{_fmt(p95, 1)} ms"
            out.append(verdict(None if r is None else p95 is not None and p95 <= limit,
                               f"small graph c16 {kind} p95 <= {limit:g} ms: {got}"
                               f"{_rebuilt(service)}"))
    for cell, want in (("small", SMALL_GRAPH_RATIO), (MONTH_CELL, MONTH_RATIO)):
        for kind in ("first", "next"):
            for service in OURS:
                r = find(rows, cell, service, kind, 16)
                if r is None and service == REBUILD:
                    continue
                ratio = r.get("ratio_vs_pull") if r else None
                got = "-" if ratio is None else f"{ratio:.2f}x"
                out.append(verdict(None if ratio is None else ratio >= want,
                                   f"{cell} c16 {kind}: ours >= {want:g}x pull pages/s: {got}"
                                   f"{_rebuilt(service)}"))
    for follows in sorted({r["follows"] for r in rows if r["history_days"] == 1 and r["follows"]}):
        for conns in (1, 16):
            for service in OURS:
                one = find(rows, f"h1-f{follows}", service, "first", conns)
                ninety = find(rows, f"h90-f{follows}", service, "first", conns)
                if one and ninety and one["p95_ms"] and ninety["p95_ms"]:
                    ratio = ninety["p95_ms"] / one["p95_ms"]
                    out.append(verdict(ratio <= FLAT_HISTORY_RATIO,
                                       f"first-page p95 90 d vs 1 d, {follows} follows, c{conns}: "
                                       f"{ninety['p95_ms']:.1f} / {one['p95_ms']:.1f} ms = {ratio:.2f}x "
                                       f"(<= {FLAT_HISTORY_RATIO}x){_rebuilt(service)}"))
    for r in (r for r in rows if r["service"] == "ours" and r["connections"] == 64):
        errors = r["failed"] + r["socket_errors"] + r["timeouts"]
        out.append(verdict(errors == 0, f"{r['cell']} c64 {r['kind']}: non-2xx other than "
                                        f"503+Retry-After = {errors} (shed {r['shed']})"))
    return out


def plot(rows: list[dict], path: Path) -> None:
    fig, axes = plt.subplots(2, 2, figsize=(12, 9), sharex=True)
    grid = [r for r in rows if r["history_days"] and r["cell"] != "small"]
    follows = sorted({r["follows"] for r in grid})
    colors = dict(zip(follows, plt.rcParams["axes.prop_cycle"].by_key()["color"]))
    for i, kind in enumerate(("first", "next")):
        for j, conns in enumerate((1, 16)):
            ax = axes[i][j]
            for f in follows:
                cells = sorted({(r["history_days"], r["cell"]) for r in grid if r["follows"] == f})
                ours = [(h, find(rows, c, "ours", kind, conns)) for h, c in cells]
                pull = [(h, best_pull(rows, c, kind, conns)) for h, c in cells]
                _line(ax, ours, "-o", colors[f], f"ours, {f} follows")
                _line(ax, pull, "--x", colors[f], f"pull (best shape), {f} follows")
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlim(0.8, 110)
            ax.set_xticks([1, 7, 30, 90], ["1", "7", "30", "90"])
            ax.set_title(f"{kind} page, {conns} connection(s)")
            ax.set_xlabel("history (days)")
            ax.set_ylabel("pages/s")
            ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _line(ax, points: Iterable[tuple[int, dict | None]], style: str, color: str, label: str) -> None:  # type: ignore[no-untyped-def]
    pts = [(h, r["pages_per_s"]) for h, r in points if r is not None]
    if pts:
        ax.plot(*zip(*pts), style, color=color, label=label)


def write_report(out: Path, rows: list[dict], meta: dict) -> Path:
    """Write report.md, result.json and pages_per_s.png; print ratios and verdicts."""
    enrich(rows)
    verdicts = targets(rows)
    out.mkdir(parents=True, exist_ok=True)
    (out / "result.json").write_text(json.dumps({"meta": meta, "runs": rows, "targets": verdicts},
                                                indent=2, default=str))
    (out / "report.md").write_text(markdown(rows, meta, verdicts))
    plot(rows, out / "pages_per_s.png")
    print("\nours / pull (best shape), pages/s and p95 (computed):")
    for r in rows:
        if "ratio_vs_pull" in r:
            print(f"  {r['cell']:10} {r['kind']:5} c{r['connections']:<3} {r['ratio_vs_pull']:6.2f}x pages/s"
                  f"   p95 {r['p95_vs_pull']}x   (vs {r['pull_baseline']})")
    print("\ntargets (computed):")
    for v in verdicts:
        print("  " + v)
    return out / "report.md"
