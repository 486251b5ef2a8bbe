"""Operator commands over the fan-out's data; the fan-out imports none of them.

* ``rebuild_inbox``: refill readers' inboxes (over the fan-out's ``rebuild.py``)
* ``reconcile``: follower counts against Postgres: report drift
* ``repair``: the Cassandra copies against Postgres: compare and repair
"""
