"""The serving copies a page reads: Cassandra, and the process's cache of it.

* ``store``: ``FeedPort`` and ``FeedStore``, the read path's Cassandra calls (thin I/O)
* ``serving_cache``: ``ServingCache`` and ``CachedFeedStore``, copies kept in the process
* ``notices``: the serving-changes consumer that drops cached copies; ``ApiNotices``
* ``bodies``: ``PostCopies``, post copies read in batches behind a body cache
* ``post_view``: ``PostView`` and ``PostBody``, a post as one request reads it
* ``likes``: ``LikeCounts`` and ``PageLikes``, a page's like counts and the reader's likes
* ``accounts``: ``AccountCopies``, which authors are suspended or deleted (the account copy)
* ``names``: ``Names`` and ``PageNames``, the authors' handles and display names
"""
