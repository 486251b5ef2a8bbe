"""Helpers the tests share (no tests here): waiting, a seeded serving store, worker
subprocesses, hand-built CDC events. Fixtures that use them live in the conftest.py of
the tests that need them."""
