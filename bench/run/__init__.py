"""The end-to-end run (``make bench``, ``make bench-full``: ``python -m bench.run``): the
whole pipeline against its baselines, its phases, report and plots; the capacity model
computed from its costs; the demo's backlog drain and streams at scale."""
