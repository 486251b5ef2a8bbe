"""Ranking snapshots and the pages cut from them.

* ``snapshot``: feed versions, the packed ranked list and its slot rows, ``SnapshotCache`` (pure)
* ``snapshot_writer``: ``SnapshotWriter``, snapshots stored behind the page in slot rows
* ``paging``: a page after a ``(rank, post_id)`` boundary, filled with eligible entries (pure)
* ``cursor``: opaque, signed feed cursors (pure)
* ``list_cursor``: the same for a user's lists: posts, followers, following (pure)
"""
