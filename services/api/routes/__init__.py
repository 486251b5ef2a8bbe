"""HTTP routers, one module per resource; ``services.api.app`` includes them.

* ``feed``: ``GET /v1/feed``; ``feed_fast``: the same, for well-formed requests, without
  FastAPI's layers
* ``stream``: ``GET /v1/feed/stream`` (SSE)
* ``posts``: create, read and delete posts
* ``social``: follow, block, mute and like
* ``user_lists``: ``GET /v1/users/{id}/posts``, ``/followers``, ``/following``
* ``moderation``: remove or restore a post (moderators)
* ``preferences``: ``GET|PUT /v1/me/preferences``
* ``accounts``: ``DELETE /v1/me``; suspend and unsuspend an account (moderators)
* ``profiles``: ``PUT /v1/me/profile`` and ``GET /v1/users/{id}`` (handle, display name, counts)
* ``health``: liveness, readiness and metrics
* ``web``: the feed page at ``/``
"""
