"""Postgres statements of the write path, one module per aggregate. Thin: no decisions.

* ``posts``: the ``posts`` table
* ``social``: ``follows``, ``blocks``, ``likes`` and ``mutes``
* ``moderation``: ``posts.visibility`` and ``moderation_actions``, changed together
* ``idempotency``: the ``idempotency_keys`` table
* ``accounts``: ``account_states``: an account's deletion (with what it removes) and suspension
* ``profiles``: a user's handle and display name (``users``)
"""
