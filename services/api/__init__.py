"""The feed API: the write path on Postgres (posts, follows, blocks, likes, moderation).

``app.create_app(settings)`` builds the FastAPI object; ``python -m services.api`` serves it.
"""
