"""Server-sent events for the feed (``GET /v1/feed/stream``).

* ``session``: one open stream, from its ``connected`` comment to its end
* ``hub``: routes the fan-out's events to this process's streams, with a resume buffer
* ``consumer``: this process's Kafka consumer of the author events
* ``restart_plan``: where that consumer resumes after a restart (pure)
* ``gate``: authorization and eligibility of each event
* ``write_deadline``: an event's write held to its last check
* ``leases``: the per-user cap on open streams, shared by every API process
* ``metrics``: the stream's metrics
* ``wiring``: opening the stream's parts in the app's lifespan
"""
