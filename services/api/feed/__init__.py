"""The feed read path (issue 6): candidates -> eligibility -> rank -> snapshot -> page.

* ``store``: the Cassandra reads and writes (prepared statements, a timeout on each call)
* ``candidates``: which posts a reader's first page may hold (inbox, celebrity and
  fallback author partitions), deduplicated by post_id
* ``eligibility``: pure filter (deleted, removed, blocked, unfollowed, before following_since)
* ``snapshot``: feed versions and the packed ranked list stored per first page
* ``paging``: pure "items strictly after (rank, post_id)" and page filling
* ``bodies``: post copies fetched in batches behind an in-process body cache
* ``reader``: ``FeedReader``, the first-page / next-page use cases the route calls
"""
