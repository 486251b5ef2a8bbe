"""What the parts agree on: topic names and settings, the CDC envelope, each service's events.

* ``topics``: topic names and settings
* ``envelope``: Debezium change envelopes as typed records
* ``feed_events``: ``author-events``: one record per post made readable
* ``rank_moves``: ``rank-key-moves``: a post's rows move to a new key
* ``reader_events``: ``reader-events``: a reader the fan-out must act on
* ``serving_changes``: ``serving-changes``: which serving copies a worker changed
* ``edge_counts``: ``follow-counts`` and ``like-counts``: edges keyed by what they count
* ``visibility_log``: the visibility log's SQL the API and the fan-out share (its head)
"""
