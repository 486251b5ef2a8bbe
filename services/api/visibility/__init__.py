"""The visibility guarantee: a page or stream event shows nothing the visibility log hides.

* ``fence``: ``VisibilityFence``, the log's new entries read before each page is judged
* ``visibility_log``: ``LogReader``, the log's reads on Postgres
* ``recent_changes``: what the log says about one reader's page (pure)
* ``window_check``: what Postgres says now of one page window, when the log holds too much
* ``eligibility``: ``judge``, whether a reader may see a post now (pure)
* ``commit_wait``: a hiding write answered a fixed time after its commit; the stream's bound
"""
