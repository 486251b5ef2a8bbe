#!/bin/bash
# ABAB of the posts agent's batch and in-flight defaults: H = 7b6da33 (1000 / 256),
# W = the working tree (2000 / 512), S = 1edc63e (the start of the cost work).
cd /work/main
run() { timeout 900 .venv/bin/python -m bench.fanout.history_drain --worker-root "$2" --out bench/results/2026-12-06-posts-rounds/$1.json > bench/results/2026-12-06-posts-rounds/$1.log 2>&1; }
run head-1 /tmp/h-head
run work-1 /work/main
run start-1 /tmp/h-start
run work-2 /work/main
run head-2 /tmp/h-head
run start-2 /tmp/h-start
