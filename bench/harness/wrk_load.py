"""HTTP load from wrk (a C load generator) with a generated Lua script, and the CPU the
server and the stores spent meanwhile.

Each request picks a random ``(path, Authorization)`` entry of the run (a reader's first
page, or its next page with a cursor fetched beforehand); ``done()`` prints one JSON line
with the counts and latency percentiles. A 503 carrying Retry-After is counted apart
(shedding, allowed); every other non-2xx is a failure. CPU is utime+stime from
``/proc/<pid>/stat`` of each watched process and all its descendants (plus what exited
children left in cutime/cstime), read before and after the run.
"""
from __future__ import annotations

import functools
import json
import os
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from deploy.stack.layout import Layout
from deploy.stack.toolchain import ensure_wrk

# One wrk thread: enough for tens of thousands of requests/s, and it leaves the most
# of the 2 cores to the servers being measured.
WRK_THREADS = 1
# A request slower than this is a timeout in wrk's counts (far above any page here).
WRK_TIMEOUT_S = 5
# wrk itself is killed this long after its run should have ended.
WRK_GRACE_S = 30
# Background sample of the stores' CPU before each run: long enough for a few clock
# ticks of a busy process, short against the run.
IDLE_SAMPLE_S = 1.0
_TICK = os.sysconf("SC_CLK_TCK")


@functools.cache
def wrk_program() -> str:
    """The path of ``wrk``, installed from Debian's package on first use when missing."""
    return ensure_wrk(Layout.from_env().logs / "wrk-install.log")

_MARK = "WRKJSON "

_LUA = r"""
local entries = {
%(entries)s
}
local prepared = {}
shed = 0
failed = 0
statuses = {}
local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  math.randomseed(os.time() + %(seed)d)
  for i, e in ipairs(entries) do
    local headers = {}
    if e[2] ~= "" then headers["Authorization"] = e[2] end
    prepared[i] = wrk.format("GET", e[1], headers)
  end
end

function request()
  return prepared[math.random(#prepared)]
end

function response(status, headers, body)
  if status >= 300 then
    statuses[status] = (statuses[status] or 0) + 1
    if status == 503 and (headers["retry-after"] or headers["Retry-After"]) then
      shed = shed + 1
    else
      failed = failed + 1
    end
  end
end

function done(summary, latency, requests)
  local s, f, codes = 0, 0, {}
  for _, t in ipairs(threads) do
    s = s + t:get("shed")
    f = f + t:get("failed")
    for code, n in pairs(t:get("statuses")) do
      codes[#codes + 1] = string.format('"%%d": %%d', code, n)
    end
  end
  local e = summary.errors
  io.write(string.format(
    '%(mark)s{"requests": %%d, "duration_us": %%d, "shed": %%d, "failed": %%d, ' ..
    '"socket_errors": %%d, "timeouts": %%d, "p50_us": %%d, "p95_us": %%d, "p99_us": %%d, ' ..
    '"statuses": {%%s}}\n',
    summary.requests, summary.duration, s, f, e.connect + e.read + e.write, e.timeout,
    latency:percentile(50), latency:percentile(95), latency:percentile(99),
    table.concat(codes, ", ")))
end
"""


def store_cpu_total(store_cpu_s: dict[str, float | None]) -> float | None:
    """The stores' CPU over a run, summed; None when one of them was not measured (it
    restarted during the run), rather than the others' alone."""
    measured = list(store_cpu_s.values())
    return sum(v for v in measured if v is not None) if measured and None not in measured else None


@dataclass
class WrkResult:
    connections: int
    requests: int
    ok: int                 # 2xx
    shed: int               # 503 with Retry-After
    failed: int             # any other non-2xx
    socket_errors: int
    timeouts: int
    duration_s: float
    pages_per_s: float      # 2xx per second
    p50_ms: float | None    # None: no request completed within the run
    p95_ms: float | None
    p99_ms: float | None
    server_cpu_s: float
    store_cpu_s: dict[str, float | None]
    store_idle_cpu_per_s: dict[str, float]  # the stores' CPU/s just before, with no load from us
    statuses: dict[str, int]  # non-2xx responses by status code
    load_avg_1m: float        # the machine's load average when the run ended

    @property
    def non_2xx(self) -> int:
        return self.shed + self.failed

    def as_dict(self) -> dict[str, object]:
        return {**asdict(self), "non_2xx": self.non_2xx}


def lua_script(entries: list[tuple[str, str]], seed: int = 0) -> str:
    """The run's Lua: ``entries`` are ``(path, Authorization header or "")``."""
    rows = ",\n".join(f"  {{{_lua_str(path)}, {_lua_str(auth)}}}" for path, auth in entries)
    return _LUA % {"entries": rows, "seed": seed, "mark": _MARK}


def _lua_str(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _stat(pid: int) -> tuple[int, float, float] | None:
    """(ppid, utime+stime, cutime+cstime) in seconds; None if the process is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2:].split()
    # After the name: state(0) ppid(1) ... utime(11) stime(12) cutime(13) cstime(14).
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / _TICK, \
        (int(fields[13]) + int(fields[14])) / _TICK


def tree_cpu_s(root: int) -> float:
    """CPU seconds of ``root``, its live descendants and its reaped children."""
    stats = {int(p): _stat(int(p)) for p in os.listdir("/proc") if p.isdigit()}
    children: dict[int, list[int]] = {}
    for pid, st in stats.items():
        if st is not None:
            children.setdefault(st[0], []).append(pid)
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        st = stats.get(pid)
        if st is None:
            continue
        total += st[1] + (st[2] if pid == root else 0.0)
        todo += children.get(pid, [])
    return total


def idle_cpu_per_s(pids: dict[str, int], seconds: float) -> dict[str, float]:
    """CPU/s each process tree spends while we send nothing (others' load, compactions)."""
    before = {k: tree_cpu_s(p) for k, p in pids.items()}
    time.sleep(seconds)
    return {k: round((tree_cpu_s(p) - before[k]) / seconds, 3) for k, p in pids.items()}


def run_wrk(url: str, entries: list[tuple[str, str]], connections: int, duration_s: float,
            server_pid: int, store_pids: dict[str, int],
            idle: dict[str, float] | None = None) -> WrkResult:
    """One bounded wrk run against ``url`` (scheme://host:port) with ``entries``."""
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(lua_script(entries, seed=connections))
        script = f.name
    argv = [wrk_program(), f"-t{min(WRK_THREADS, connections)}", f"-c{connections}",
            f"-d{max(1, round(duration_s))}s", f"--timeout={WRK_TIMEOUT_S}s", "-s", script, url]
    before = tree_cpu_s(server_pid), {k: tree_cpu_s(p) for k, p in store_pids.items()}
    try:
        out = subprocess.run(argv, capture_output=True, text=True,
                             timeout=duration_s + WRK_GRACE_S, check=True).stdout
    finally:
        os.unlink(script)
    server_cpu = tree_cpu_s(server_pid) - before[0]
    # A store restarted during the run (another engineer's test) has a new pid: no figure.
    store_cpu = {k: round(d, 2) if d >= 0 and before[1][k] > 0 else None
                 for k, p in store_pids.items() for d in [tree_cpu_s(p) - before[1][k]]}
    line = next(x for x in out.splitlines() if x.startswith(_MARK))
    raw = json.loads(line[len(_MARK):])
    duration = raw["duration_us"] / 1e6
    bad = raw["shed"] + raw["failed"]
    ok = raw["requests"] - bad
    done = raw["requests"] > 0
    return WrkResult(connections, raw["requests"], ok, raw["shed"], raw["failed"],
                     raw["socket_errors"], raw["timeouts"], round(duration, 2),
                     round(ok / duration, 1) if duration else 0.0,
                     *(raw[k] / 1000 if done else None for k in ("p50_us", "p95_us", "p99_us")),
                     round(server_cpu, 2), store_cpu, idle or {}, raw["statuses"],
                     round(os.getloadavg()[0], 2))


def warm_and_run(url: str, entries: list[tuple[str, str]], connections: int,
                 duration_s: float, warmup_s: float, server_pid: int,
                 store_pids: dict[str, int]) -> WrkResult:
    """A short unrecorded run with the same load, a second of the stores' background CPU
    (which also lets the warm-up's last responses drain), then the measured run."""
    if warmup_s > 0:
        run_wrk(url, entries, connections, warmup_s, server_pid, {})
    idle = idle_cpu_per_s(store_pids, IDLE_SAMPLE_S)
    return run_wrk(url, entries, connections, duration_s, server_pid, store_pids, idle)
