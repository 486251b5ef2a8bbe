-- Mutes: a reader stops seeing an author's posts without unfollowing them
-- (services/api/README.md, "Visibility"). One-directional: only the muter stops seeing the muted user;
-- the muted user still sees the muter, and follows are left as they are.
CREATE TABLE mutes (
    muter_id    BIGINT NOT NULL REFERENCES users (user_id),
    muted_id    BIGINT NOT NULL REFERENCES users (user_id),
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (muter_id, muted_id),
    CHECK (muter_id <> muted_id)
);

-- Captured like blocks: the fan-out writes the read path's copy (a 'mute' row in the
-- muter's partition of Cassandra's ``blocks``) from these changes.
ALTER TABLE mutes REPLICA IDENTITY FULL;
ALTER PUBLICATION feed_cdc ADD TABLE mutes;

-- The visibility fence (0003): a mute hides at once, whatever the pipeline's lag, and an
-- unmute lifts that hiding. 'mute': subject = muter_id, object = muted_id, hidden = muted.
ALTER TABLE visibility_changes DROP CONSTRAINT visibility_changes_kind_check;
ALTER TABLE visibility_changes ADD CONSTRAINT visibility_changes_kind_check
    CHECK (kind IN ('post', 'follow', 'block', 'mute'));

CREATE FUNCTION log_mute_added() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM new_rows) THEN
        PERFORM visibility_fence_lock();
        INSERT INTO visibility_changes (seq, kind, subject_id, object_id, hidden)
        SELECT nextval('visibility_changes_seq'), 'mute', n.muter_id, n.muted_id, true
        FROM new_rows n;
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER mutes_added AFTER INSERT ON mutes
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION log_mute_added();

CREATE FUNCTION log_mute_removed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM gone_rows) THEN
        PERFORM visibility_fence_lock();
        INSERT INTO visibility_changes (seq, kind, subject_id, object_id, hidden)
        SELECT nextval('visibility_changes_seq'), 'mute', g.muter_id, g.muted_id, false
        FROM gone_rows g;
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER mutes_removed AFTER DELETE ON mutes
    REFERENCING OLD TABLE AS gone_rows
    FOR EACH STATEMENT EXECUTE FUNCTION log_mute_removed();
