#!/bin/bash
cd /work/main
run() { timeout 900 .venv/bin/python -m bench.fanout.history_drain --fanout-workers 3 --worker-root "$2" --out bench/results/2026-12-06-posts-rounds/$1.json > bench/results/2026-12-06-posts-rounds/$1.log 2>&1; }
run work-3w /work/main
run start-3w /tmp/h-start
run head-3w /tmp/h-head
run head-3w-2 /tmp/h-head
run work-3w-2 /work/main
