#!/bin/bash
cd /work/main
for i in 1 2; do
  .venv/bin/python -m bench.fanout.history_drain --worker-root /tmp/h-base --out bench/results/2026-12-06-worker-uvloop/ab-base-$i.json > bench/results/2026-12-06-worker-uvloop/ab-base-$i.log 2>&1
  .venv/bin/python -m bench.fanout.history_drain --out bench/results/2026-12-06-worker-uvloop/ab-work-$i.json > bench/results/2026-12-06-worker-uvloop/ab-work-$i.log 2>&1
done
echo done > bench/results/2026-12-06-worker-uvloop/drain-ab.done
