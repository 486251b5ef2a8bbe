"""The ranker worker: likes and feature events into post scores and rank keys (docs/ranking.md).

* ``app``: the faust agents; ``__main__``: runs the worker
* ``rank_keys``: rescores posts, and publishes a key that moved enough for the fan-out
* ``features``: rank-feature events (pure)
* ``store``: the ranker's Cassandra rows: like copies, counts, the post's rank key
"""
