"""The feed API: the write path on Postgres (posts, follows, blocks, likes, moderation),
the ranked feed read from Cassandra (``feed/``), its SSE stream (``stream/``) and the
feed page (``web/``).

``app.create_app(settings)`` builds the FastAPI object; ``python -m services.api`` serves it.
"""
