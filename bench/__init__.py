"""Benchmarks (``python -m bench.<name>``; ``make bench``).

Every benchmark runs the services on the built-in development secrets, which the API
accepts only with the development flag (``services/shared/secret_policy.py``). Setting
it here, at import of the package, covers every benchmark and every process one starts
(they inherit the environment); an explicit ``FEED_DEV_MODE`` is kept.
"""
import os

os.environ.setdefault("FEED_DEV_MODE", "true")
