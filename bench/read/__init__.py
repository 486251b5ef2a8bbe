"""Reads: the grid of our feed API against the strongest pull service (``make bench-read``),
its data and report, the A/B of two trees (``make bench-read-ab``), the pull baseline, and
rank-key rows after a month."""
