"""Operator commands over the fan-out's data: refill inboxes (``rebuild_inbox``) and report count drift (``reconcile``)."""
