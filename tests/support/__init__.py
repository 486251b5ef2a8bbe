"""Helpers the tests share (no tests here); their fixtures live in each suite's conftest.py.

* ``waiting``: waiting for a condition with a deadline
* ``processes``: free ports, HTTP readiness, a test database dropped with its slots
* ``ports``: ports for a private stack, outside the range the kernel gives clients
* ``worker_env``: the fan-out and ranker as subprocesses, on a keyspace and prefix per test
* ``cdc_relay``: the relay on a fresh database and topic prefix
* ``api_server``: the real API served in a thread
* ``stream_api``: the API served for its SSE stream; opening one, the next ``new_item``
* ``feed_world``: the read path's tests' data, written the fan-out's way
* ``fence_scene``: a reader, an author and stale copies, for the fence's tests
* ``memory_stores``: in-memory stores, held to the real ones by ``contracts/``
* ``serving_cache_fakes``: the serving cache over a counting in-memory store
* ``fakes``: small fakes the unit tests share
* ``jwks``: gateway-token signers and their JWKs
* ``kafka_topics``: a topic read back whole
* ``schemas``: the topics' JSON Schemas and examples in ``schemas/``
* ``contracts/``: one contract suite per store Protocol

What the benchmarks use too (hand-built CDC events, the wait for a consumer group) lives
in ``bench/harness/``: the tests import it, the benchmarks never import the tests.
"""
