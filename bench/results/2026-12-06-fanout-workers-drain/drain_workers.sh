#!/usr/bin/env bash
# The demo drain on three nodes with N fan-out workers (1 ranker, 6 partitions both ways),
# each on a fresh stack folder: bash drain_workers.sh N
set -u
N=$1
cd /work/main
export FEED_STACK_DIR=/tmp/ab-drain-w$N FEED_STACK_LIB=/work/main/.stack/lib
rm -rf "$FEED_STACK_DIR"
OUT=/tmp/ab/workers-w$N
t0=$(date +%s)
make up NODES=3 > $OUT.up.log 2>&1 || { echo "up failed"; exit 1; }
t_up=$(date +%s)
make migrate NODES=3 FANOUT_WORKERS=$N RANKER_WORKERS=1 PARTITIONS=6 >> $OUT.up.log 2>&1 || { echo "migrate failed"; exit 1; }
eval "$(.venv/bin/python -m deploy.stack env)"
.venv/bin/python -m bench.run.drain --out $OUT.json > $OUT.drain.log 2>&1 &
DRAIN=$!
t_run=$(date +%s)
make run NODES=3 FANOUT_WORKERS=$N RANKER_WORKERS=1 PARTITIONS=6 > $OUT.run.log 2>&1; rc=$?
t_served=$(date +%s)
.venv/bin/python -m deploy.assignment --stack > $OUT.assignment.txt 2>&1 || true
wait $DRAIN
t_drained=$(date +%s)
.venv/bin/python -m bench.harness.stack_cpu > $OUT.cpu.json
echo "workers=$N rc=$rc up_s=$((t_up-t0)) served_after_s=$((t_served-t_run)) drained_after_s=$((t_drained-t_run))" | tee $OUT.summary
.venv/bin/python -m deploy.services stop > /dev/null 2>&1
.venv/bin/python -m deploy.stack down > /dev/null 2>&1
.venv/bin/python -m deploy.stack reset > /dev/null 2>&1 || true
