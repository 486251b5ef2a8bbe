"""The feed API (README.md beside this says more).

``app.create_app(settings)`` builds the FastAPI object; ``python -m services.api`` serves it.

* ``app``: ``create_app`` and its lifespan; ``__main__``: serves it with uvicorn
* ``token``: a development token on the command line
* ``http/``: what every request passes: edge layer, auth, problems, logs, metrics
* ``routes/``: the HTTP routes, one module per resource
* ``write/``: the write path's decisions; ``stores/``: its Postgres statements
* ``feed/``: the feed read use cases
* ``copies/``: the serving copies a page reads: Cassandra and the process's cache
* ``visibility/``: the visibility fence: nothing hidden is ever shown
* ``snapshots/``: ranking snapshots, pages and cursors
* ``stream/``: the SSE stream
* ``web/``: the feed page (static)
"""
