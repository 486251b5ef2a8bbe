#!/bin/bash
# ABAB history drains: base = the fan-out from /tmp/h-backlog-base (1edc63e), mine = /work/main
cd /work/main
for round in 1 2; do
  for side in base mine; do
    root=(); [ $side = base ] && root=(--worker-root /tmp/h-backlog-base)
    timeout 1200 .venv/bin/python -m bench.fanout.history_drain "${root[@]}" --out /tmp/ab/hd-$side$round.json > /tmp/ab/hd-$side$round.log 2>&1
    echo "$side$round rc=$?"
    python3 -c "
import json; d=json.load(open('/tmp/ab/hd-$side$round.json')); c=d['cpu']
print('$side$round', 'drain', d['drain s (COPY to lag 0)'], 'rows', d['inbox rows written'], 'fanout CPU-s', c.get('fanout CPU-s'), 'cass', c.get('cassandra CPU-s'), 'kafka', c.get('kafka CPU-s'))"
  done
done
