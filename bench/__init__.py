"""Benchmarks (``python -m bench`` lists them; ``make bench``).

* ``__main__``: the index: which benchmark answers which question
* ``run/``: the whole pipeline against its baselines, the capacity model, drains, streams
* ``read/``: the read grid against a pull service, A/B of two trees, rank-key rows
* ``fanout/``: fan-out rows/s against the raw writer and the floor; drains, follows, counts
* ``cdc/``: the relay against raw decode and produce, and against Debezium
* ``write/``: POST /v1/posts throughput, Snowflake ids and what their type costs
* ``harness/``: what every benchmark shares (the tests use parts of it)
* ``results/``: kept runs, one dated folder each with its README; ``out/``: new output

The services run on the built-in development secrets, which the API accepts only with
the development flag (``services/shared/secret_policy.py``): set here, at import, for
every benchmark and every process one starts; an explicit ``FEED_DEV_MODE`` is kept.
"""
import os

os.environ.setdefault("FEED_DEV_MODE", "true")
