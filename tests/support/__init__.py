"""Helpers the tests share (no tests here): waiting, a seeded serving store, worker
subprocesses, the API served for its stream, the serving cache's store counting what it
lets through, in-memory stores (memory_stores.py) and the contract suites that hold them
to the real ones (contracts/). Fixtures that use them live in the conftest.py of the
tests that need them. What the benchmarks use too (hand-built CDC events, the wait for a
consumer group) lives in bench/harness/: the tests import it, the benchmarks never
import the tests."""
