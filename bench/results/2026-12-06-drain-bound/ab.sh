#!/bin/bash
cd /work/main
for round in 1 2; do
  for side in base mine; do
    root=(); [ $side = base ] && root=(--worker-root /tmp/h-backlog-base)
    timeout 900 .venv/bin/python -m bench.fanout.history_drain "${root[@]}" --out /tmp/ab/hd-$side$round.json > /tmp/ab/hd-$side$round.log 2>&1
    echo "$side$round rc=$?"
  done
done
echo ALLDONE
