-- Account deletion and suspension (docs/api.md, "Accounts"; docs/read-path.md, "Hidden
-- accounts").
--
-- account_states: one row per account that is hidden from everyone: 'suspended' by a
-- moderator (the row is deleted again by an unsuspend) or 'deleted' by its owner (final:
-- the row is never removed). No foreign key: a deleted account's users row is DELETED
-- (data teams get a Debezium delete and its tombstone on <prefix>.public.users), and
-- this row outlives it, so the id is never taken again (Snowflake ids are never reused
-- anyway; the row is what keeps a deleted user's token from recreating the user). The
-- deleted account's posts stay in posts (hidden by this row, for everyone).
CREATE TABLE account_states (
    user_id       BIGINT PRIMARY KEY,
    state         TEXT NOT NULL CHECK (state IN ('suspended', 'deleted')),
    reason        TEXT NOT NULL DEFAULT '',
    moderator_id  BIGINT NULL,                 -- NULL: the owner deleted the account
    changed_at    TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- Captured: the fan-out writes the read path's copy (Cassandra account_states) from it,
-- and data teams see suspensions, unsuspends (a delete and its tombstone) and deletions.
ALTER TABLE account_states REPLICA IDENTITY FULL;
ALTER PUBLICATION feed_cdc ADD TABLE account_states;

-- The users row of a deleted account goes; its posts stay (hidden). posts.author_id can
-- therefore no longer reference users. New posts are still checked (below).
ALTER TABLE posts DROP CONSTRAINT posts_author_id_fkey;

-- The visibility fence (0003): ONE entry per account change, whatever its number of
-- posts. 'account': subject = user_id, object = 0, hidden = suspended or deleted. It
-- applies to every reader (the API folds it globally).
ALTER TABLE visibility_changes DROP CONSTRAINT visibility_changes_kind_check;
ALTER TABLE visibility_changes ADD CONSTRAINT visibility_changes_kind_check
    CHECK (kind IN ('post', 'follow', 'block', 'mute', 'account'));

CREATE FUNCTION log_account_state() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- Only a change of hidden-ness is logged (suspended -> deleted stays hidden).
    IF TG_OP = 'INSERT' OR (TG_OP = 'DELETE') THEN
        PERFORM visibility_fence_lock();
        INSERT INTO visibility_changes (seq, kind, subject_id, object_id, hidden)
        VALUES (nextval('visibility_changes_seq'), 'account',
                CASE WHEN TG_OP = 'INSERT' THEN NEW.user_id ELSE OLD.user_id END, 0,
                TG_OP = 'INSERT');
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER account_states_visibility AFTER INSERT OR DELETE ON account_states
    FOR EACH ROW EXECUTE FUNCTION log_account_state();

-- A deletion removes the account's follows, blocks and mutes in its own transaction,
-- after writing its account_states row: those removals are not logged one per pair (the
-- account entry hides the deleted user's posts from everyone already, and the deleted
-- user reads nothing), so a deletion is one entry however many followers it had.
CREATE FUNCTION account_deleted(user_id BIGINT) RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT EXISTS (SELECT 1 FROM account_states a WHERE a.user_id = $1 AND a.state = 'deleted');
$$;

CREATE OR REPLACE FUNCTION log_follow_removed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM gone_rows g WHERE NOT account_deleted(g.follower_id)
               AND NOT account_deleted(g.followed_id)) THEN
        PERFORM visibility_fence_lock();
        INSERT INTO visibility_changes (seq, kind, subject_id, object_id, hidden)
        SELECT nextval('visibility_changes_seq'), 'follow', g.follower_id, g.followed_id, true
        FROM gone_rows g
        WHERE NOT account_deleted(g.follower_id) AND NOT account_deleted(g.followed_id);
    END IF;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION log_block_removed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM gone_rows g WHERE NOT account_deleted(g.blocker_id)
               AND NOT account_deleted(g.blocked_id)) THEN
        PERFORM visibility_fence_lock();
        INSERT INTO visibility_changes (seq, kind, subject_id, object_id, hidden)
        SELECT nextval('visibility_changes_seq'), 'block', g.blocker_id, g.blocked_id, false
        FROM gone_rows g
        WHERE NOT account_deleted(g.blocker_id) AND NOT account_deleted(g.blocked_id);
    END IF;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION log_mute_removed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM gone_rows g WHERE NOT account_deleted(g.muter_id)
               AND NOT account_deleted(g.muted_id)) THEN
        PERFORM visibility_fence_lock();
        INSERT INTO visibility_changes (seq, kind, subject_id, object_id, hidden)
        SELECT nextval('visibility_changes_seq'), 'mute', g.muter_id, g.muted_id, false
        FROM gone_rows g
        WHERE NOT account_deleted(g.muter_id) AND NOT account_deleted(g.muted_id);
    END IF;
    RETURN NULL;
END $$;

-- What a hidden account may not do: post, follow, like, block or mute. The API answers
-- 403 (suspended) or 410 (deleted) problem+json (SQLSTATE 42501, HINT = the state).
-- A write that committed before the account was hidden is hidden with everything else.
CREATE FUNCTION refuse_hidden_actor() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    found_state TEXT;
BEGIN
    EXECUTE format('SELECT a.state FROM new_rows n JOIN account_states a ON a.user_id = n.%I LIMIT 1',
                   TG_ARGV[0]) INTO found_state;
    IF found_state IS NOT NULL THEN
        RAISE EXCEPTION 'the account is %', found_state
            USING ERRCODE = 'insufficient_privilege', HINT = found_state;
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER posts_refuse_hidden AFTER INSERT ON posts REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION refuse_hidden_actor('author_id');
CREATE TRIGGER follows_refuse_hidden AFTER INSERT ON follows REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION refuse_hidden_actor('follower_id');
CREATE TRIGGER likes_refuse_hidden AFTER INSERT ON likes REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION refuse_hidden_actor('user_id');
CREATE TRIGGER blocks_refuse_hidden AFTER INSERT ON blocks REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION refuse_hidden_actor('blocker_id');
CREATE TRIGGER mutes_refuse_hidden AFTER INSERT ON mutes REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION refuse_hidden_actor('muter_id');

-- A deleted account's users row is not created again (the API's first-request insert).
CREATE FUNCTION refuse_deleted_user() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF account_deleted(NEW.user_id) THEN
        RAISE EXCEPTION 'the account is deleted'
            USING ERRCODE = 'insufficient_privilege', HINT = 'deleted';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER users_refuse_deleted BEFORE INSERT ON users
    FOR EACH ROW EXECUTE FUNCTION refuse_deleted_user();
