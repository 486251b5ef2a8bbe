"""The feed API: the write path on Postgres (``write/``, ``stores/``), the ranked feed's
use cases (``feed/``) on the serving copies (``copies/``), the visibility fence
(``visibility/``) and snapshots (``snapshots/``), its SSE stream (``stream/``), the
routes and what every request passes (``routes/``, ``http/``) and the feed page (``web/``).

``app.create_app(settings)`` builds the FastAPI object; ``python -m services.api`` serves it.
"""
