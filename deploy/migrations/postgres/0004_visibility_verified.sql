-- Verify, then forget (docs/read-path.md, "How long an entry is kept").
--
-- An entry of visibility_changes (0003) is no longer trimmed by age. One process, the
-- fan-out's verifier (services/fanout/verifier.py), walks the log in seq order, checks
-- the Cassandra copies each entry covers against Postgres (the post's copy deleted or
-- removed, the follow gone, the block present, or whatever the truth is now), repairs a
-- copy found wrong, and then moves this one row's mark. Once an entry's mark has stood
-- for the settle time (longer than any API cache may hold a copy), the verifier sets
-- `upto` past it and deletes the entries at or below `upto`. API processes read `upto`
-- with every read of the log and forget what lies at or below it: no process decides on
-- its own clock, and a hide whose change event was dead-lettered or lost stays fenced
-- until a repair has landed.
CREATE TABLE visibility_verified (
    one          BOOLEAN PRIMARY KEY DEFAULT true CHECK (one),
    -- Every entry with seq <= upto was verified (and repaired if wrong) and has settled:
    -- the copies decide for it alone. API processes forget such entries.
    upto         BIGINT NOT NULL DEFAULT 0,
    -- Every entry with seq <= checked was verified; those above upto are settling.
    checked      BIGINT NOT NULL DEFAULT 0,
    updated_at   TIMESTAMPTZ NOT NULL DEFAULT now()
);
INSERT INTO visibility_verified DEFAULT VALUES;

-- Trimming by age is gone: nothing reads the age index.
DROP INDEX IF EXISTS visibility_changes_age;
