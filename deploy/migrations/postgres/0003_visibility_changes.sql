-- The visibility fence (docs/read-path.md, "Eligibility against the truth"). Every change
-- that must hide something from a reader at once (a post deleted or removed by
-- moderation, a block, an unfollow), and every later change of the same thing (a post
-- restored, an unblock, a follow again), is appended here BY THE TRANSACTION THAT MAKES
-- IT, through the triggers below. The API reads the entries after the last one it saw
-- before it judges a page's window, so a 2xx answer to such a write is honoured by every
-- request that starts after it, whatever the CDC relay and the fan-out are doing.
--
-- Not in publication feed_cdc: the log is read by the API only, never captured.
CREATE SEQUENCE visibility_changes_seq;

CREATE TABLE visibility_changes (
    -- Assigned under FENCE_LOCK (below), held to the end of the writing transaction: a
    -- transaction takes its numbers only after every earlier writer of the log has
    -- committed and become visible, so a reader that sees entry N sees every entry below
    -- N that will ever exist, and "seq > the last I saw" never skips one.
    seq         BIGINT PRIMARY KEY,
    changed_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    -- 'post': subject = post_id, object = author_id, hidden = deleted or removed.
    -- 'follow': subject = follower_id, object = followed_id, hidden = not following;
    --           since = following_since when following.
    -- 'block': subject = blocker_id, object = blocked_id, hidden = blocked.
    kind        TEXT NOT NULL CHECK (kind IN ('post', 'follow', 'block')),
    subject_id  BIGINT NOT NULL,
    object_id   BIGINT NOT NULL,
    hidden      BOOLEAN NOT NULL,
    since       TIMESTAMPTZ NULL
);
-- A follow is logged only when its pair has an entry already (an earlier unfollow), so a
-- bulk load of new follows writes nothing here; this index answers that question.
CREATE INDEX visibility_changes_pair ON visibility_changes (kind, subject_id, object_id);
-- Trimming by age (the API's trimmer, FEED_VISIBILITY_RETENTION_S).
CREATE INDEX visibility_changes_age ON visibility_changes (changed_at);

-- FENCE_LOCK: one transaction-scoped advisory lock (key 'visibility_changes' hashed), so
-- entries are numbered in commit order. Only transactions that log take it.
CREATE FUNCTION visibility_fence_lock() RETURNS void LANGUAGE sql AS $$
    SELECT pg_advisory_xact_lock(hashtextextended('visibility_changes', 0));
$$;

CREATE FUNCTION log_post_visibility() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM changed_rows) THEN
        PERFORM visibility_fence_lock();
        INSERT INTO visibility_changes (seq, kind, subject_id, object_id, hidden)
        SELECT nextval('visibility_changes_seq'), 'post', c.post_id, c.author_id,
               c.deleted_at IS NOT NULL OR c.visibility <> 1
        FROM changed_rows c JOIN old_rows o USING (post_id)
        WHERE (c.deleted_at IS NOT NULL) IS DISTINCT FROM (o.deleted_at IS NOT NULL)
           OR c.visibility IS DISTINCT FROM o.visibility;
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER posts_visibility AFTER UPDATE ON posts
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS changed_rows
    FOR EACH STATEMENT EXECUTE FUNCTION log_post_visibility();

CREATE FUNCTION log_follow_removed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM gone_rows) THEN
        PERFORM visibility_fence_lock();
        INSERT INTO visibility_changes (seq, kind, subject_id, object_id, hidden)
        SELECT nextval('visibility_changes_seq'), 'follow', g.follower_id, g.followed_id, true
        FROM gone_rows g;
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER follows_removed AFTER DELETE ON follows
    REFERENCING OLD TABLE AS gone_rows
    FOR EACH STATEMENT EXECUTE FUNCTION log_follow_removed();

-- A new follow matters to the fence only after an unfollow of the same pair that is still
-- in the log (it lifts that entry's hiding, from its following_since on).
CREATE FUNCTION log_follow_added() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM new_rows n JOIN visibility_changes v
               ON v.kind = 'follow' AND v.subject_id = n.follower_id
              AND v.object_id = n.followed_id) THEN
        PERFORM visibility_fence_lock();
        INSERT INTO visibility_changes (seq, kind, subject_id, object_id, hidden, since)
        SELECT nextval('visibility_changes_seq'), 'follow', n.follower_id, n.followed_id,
               false, n.following_since
        FROM new_rows n
        WHERE EXISTS (SELECT 1 FROM visibility_changes v WHERE v.kind = 'follow'
                      AND v.subject_id = n.follower_id AND v.object_id = n.followed_id);
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER follows_added AFTER INSERT ON follows
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION log_follow_added();

CREATE FUNCTION log_block_added() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM new_rows) THEN
        PERFORM visibility_fence_lock();
        INSERT INTO visibility_changes (seq, kind, subject_id, object_id, hidden)
        SELECT nextval('visibility_changes_seq'), 'block', n.blocker_id, n.blocked_id, true
        FROM new_rows n;
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER blocks_added AFTER INSERT ON blocks
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION log_block_added();

CREATE FUNCTION log_block_removed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM gone_rows) THEN
        PERFORM visibility_fence_lock();
        INSERT INTO visibility_changes (seq, kind, subject_id, object_id, hidden)
        SELECT nextval('visibility_changes_seq'), 'block', g.blocker_id, g.blocked_id, false
        FROM gone_rows g;
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER blocks_removed AFTER DELETE ON blocks
    REFERENCING OLD TABLE AS gone_rows
    FOR EACH STATEMENT EXECUTE FUNCTION log_block_removed();
