#!/usr/bin/env bash
# A/B of the demo drain on three nodes: secured vs plaintext, each on a fresh stack folder.
set -u
MODE=$1
cd /work/main
export FEED_STACK_DIR=/tmp/ab-drain-$MODE FEED_STACK_LIB=/work/main/.stack/lib
if [ "$MODE" = plain ]; then export FEED_STACK_SECURED=false; fi
rm -rf "$FEED_STACK_DIR"
t0=$(date +%s)
make up NODES=3 > /tmp/ab/drain2-$MODE.up.log 2>&1 || { echo "up failed"; exit 1; }
t_up=$(date +%s)
make migrate NODES=3 >> /tmp/ab/drain2-$MODE.up.log 2>&1 || { echo "migrate failed"; exit 1; }
eval "$(.venv/bin/python -m deploy.stack env)"
.venv/bin/python -m bench.run.drain --out /tmp/ab/drain2-$MODE.json > /tmp/ab/drain2-$MODE.drain.log 2>&1 &
DRAIN=$!
t_run=$(date +%s)
make run NODES=3 > /tmp/ab/drain2-$MODE.run.log 2>&1; rc=$?
t_served=$(date +%s)
wait $DRAIN
t_drained=$(date +%s)
python3 /tmp/cpu_by_component.py > /tmp/ab/drain2-$MODE.cpu.json
echo "mode=$MODE rc=$rc up_s=$((t_up-t0)) served_after_s=$((t_served-t_run)) drained_after_s=$((t_drained-t_run))"
.venv/bin/python -m deploy.services stop > /dev/null 2>&1
.venv/bin/python -m deploy.stack down > /dev/null 2>&1
.venv/bin/python -m deploy.stack reset > /dev/null 2>&1 || true
