"""Operator commands over the fan-out's data: refill inboxes (``rebuild_inbox``, over the
fan-out's own ``rebuild.py``), report count drift (``reconcile``) and compare and repair
copies (``repair``). They import the fan-out's code; the fan-out imports none of them."""
