"""Helpers the tests share (no tests here): waiting, a seeded serving store, worker
subprocesses, hand-built CDC events, the API served for its stream, the serving cache's
fake store. Fixtures that use them live in the conftest.py of the tests that need them."""
