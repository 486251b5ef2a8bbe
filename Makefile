# Entry points. The README names two: `make run` and `make test`.
SHELL := /bin/bash
PY_BOOT ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STACK := $(PY) -m deploy.stack
NODES ?= 1
# Processes per worker role (deploy/services.py): `make run FANOUT_WORKERS=3 RANKER_WORKERS=2`,
# each under its own supervisor, all in the role's consumer group.
FANOUT_WORKERS ?= $(or $(FEED_FANOUT_WORKERS),1)
RANKER_WORKERS ?= $(or $(FEED_RANKER_WORKERS),1)
# The keyed topics' partitions when the migrator creates them: twice the larger role's
# workers, at least 3 (docs/capacity.md, "Choosing partition counts"), so every worker
# holds partitions and a lost worker's move spreads evenly. Topics that exist keep theirs
# unless they may grow in place (docs/deploy.md, "Growing a topic"). FEED_KAFKA_PARTITIONS
# (or PARTITIONS=N) wins.
PARTITIONS ?= $(or $(FEED_KAFKA_PARTITIONS),$(shell w=$(FANOUT_WORKERS); [ $(RANKER_WORKERS) -gt $$w ] && w=$(RANKER_WORKERS); echo $$(( 2 * w > 3 ? 2 * w : 3 ))))
export FEED_FANOUT_WORKERS := $(FANOUT_WORKERS)
export FEED_RANKER_WORKERS := $(RANKER_WORKERS)
export FEED_KAFKA_PARTITIONS := $(PARTITIONS)

.PHONY: help venv up down status logs reset migrate run stop-services typecheck test test-unit \
        test-integration test-e2e bench bench-full bench-read bench-read-ab faults token lag repair

help:
	@echo "make run    - stack up, migrations, all services, demo data; prints the API address"
	@echo "make test   - mypy --strict, stack up if needed, then the whole test suite"
	@echo "make down   - stop services and the stack (data kept; 'make reset' wipes it)"
	@echo "other: up status logs reset migrate typecheck test-unit test-integration test-e2e bench token lag repair"

$(VENV)/.installed: pyproject.toml
	$(PY_BOOT) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[test,bench]'
	touch $@

venv: $(VENV)/.installed

up: venv
	$(STACK) up --nodes $(NODES)

down: venv
	-$(PY) -m deploy.services stop
	$(STACK) down

status: venv
	$(STACK) status

logs: venv
	$(STACK) logs

reset: venv
	-$(PY) -m deploy.services stop
	$(STACK) reset

migrate: up
	$(PY) -m deploy.migrate --stack

# DEMO=full|small: the demo graph's size (deploy/demo.py; default full on one node,
# small on three).
run: migrate
	$(PY) -m deploy.services start
	$(if $(DEMO),FEED_DEMO_SIZE=$(DEMO) )$(PY) -m deploy.demo

stop-services: venv
	$(PY) -m deploy.services stop

# mypy --strict on services/ and deploy/ (configured in pyproject.toml); the test targets
# run it first, so a type error fails before the stack is started.
typecheck: venv
	$(PY) -m mypy

# The whole suite; its 20 slowest steps are listed at the end (CI's time goes there).
test: typecheck migrate
	$(PY) -m pytest tests --durations=20

test-unit: venv typecheck
	$(PY) -m pytest tests/unit

test-integration: migrate
	$(PY) -m pytest tests/integration

test-e2e: migrate
	$(PY) -m pytest tests/e2e

bench: migrate
	$(PY) -m bench.run --mode short

bench-full: migrate
	$(PY) -m bench.run --mode full

# Read benchmark grid with wrk: ours vs the pull baseline (bench/read/grid.py); pass
# options as BENCH_READ_ARGS="--duration 5 --skip 90x2000".
bench-read: migrate
	$(PY) -m bench.read.grid $(BENCH_READ_ARGS)

# A/B of the read path: the working tree against a git revision, runs interleaved on one
# dataset (bench/read/ab.py); e.g. BENCH_AB_ARGS="--base HEAD~1 --rounds 4".
bench-read-ab: migrate
	$(PY) -m bench.read.ab $(BENCH_AB_ARGS)

# The fault suite on the three-node stack (tests/faults, docs/reliability.md). Stops a
# running one-node stack first (the two cannot run at once); leaves the three-node stack
# up for inspection ('make down' stops it).
# The services keep 5,000 rows per inbox: the checker owes every reader every eligible post,
# and a trimmed tail (inbox_cap, 500 by default) would read as lost. The fan-out's capacity
# is pinned at 40 rows/s, so the workload's celebrity (40 followers: 1 s of fan-out, past
# the 0.75 s line) is promoted and its 24-follower wide author is not.
# The relay's delivery trace is this run's alone: the checker matches rows to it by
# transaction id, and another stack's (or an earlier cluster's) ids would collide.
FAULTS_TRACE = $(or $(FEED_STACK_DIR),$(CURDIR)/.stack)/logs/cdc-delivery.jsonl
# The verifier repairs after 150 s and releases 10 s after verifying (120 s and 360 s by
# default): the lost-hide scenario sees its hides repaired and released within the run.
FAULTS_ENV = FEED_CDC_DELIVERY_TRACE=$(FAULTS_TRACE) FEED_INBOX_CAP=5000 \
	FEED_FANOUT_CAPACITY_PINNED_ROWS_PER_S=40 \
	FEED_VISIBILITY_REPAIR_AFTER_S=150 FEED_VISIBILITY_SETTLE_S=10
faults: venv
	-$(PY) -m deploy.services stop
	-$(STACK) down
	rm -f $(FAULTS_TRACE)
	$(STACK) up --nodes 3
	$(PY) -m deploy.migrate --stack
	$(FAULTS_ENV) $(PY) -m deploy.services start
	$(FAULTS_ENV) $(PY) -m tests.faults $(FAULTS_ARGS); rc=$$?; $(PY) -m deploy.services stop; exit $$rc

token: venv
	@$(PY) -m services.api.token $(USER_ID)

lag: venv
	$(PY) -m deploy.lag --stack

# Compare the Cassandra copies with Postgres and repair what differs (docs/operations.md,
# "Repairing the copies"); e.g. REPAIR_ARGS="--reader 42 --dry-run" or "--sample 100".
repair: venv
	$(PY) -m services.fanout.jobs.repair $(REPAIR_ARGS)

# Real Debezium (Kafka Connect standalone, from Maven Central) against the relay, compared
# field by field on the same changes; see docs/cdc.md.
.PHONY: debezium-check
debezium-check: up
	$(PY) -m deploy.debezium.check
