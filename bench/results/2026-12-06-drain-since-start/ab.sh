#!/bin/bash
cd /work/main
O=bench/results/2026-12-06-drain-since-start
for i in 1 2; do
  .venv/bin/python -m bench.fanout.history_drain --worker-root /tmp/h-backlog-base --out $O/base-1edc63e-$i.json > $O/base-$i.log 2>&1
  .venv/bin/python -m bench.fanout.history_drain --out $O/head-$i.json > $O/head-$i.log 2>&1
done
.venv/bin/python -m bench.fanout.history_drain --fanout-workers 3 --out $O/head-3-workers.json > $O/head-3w.log 2>&1
.venv/bin/python -m bench.fanout.history_drain --worker-root /tmp/h-backlog-base --fanout-workers 3 --out $O/base-1edc63e-3-workers.json > $O/base-3w.log 2>&1
echo done > $O/done
