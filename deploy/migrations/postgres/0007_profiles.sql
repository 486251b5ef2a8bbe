-- Profiles: a user's handle and display name (PUT /v1/me/profile, GET /v1/users/{id};
-- docs/api.md, "Profiles"). Both are optional: a user created on a first request has
-- neither until they set one.
--
-- handle: 3-30 of [A-Za-z0-9_], stored as typed; unique whatever the case (the index on
-- lower(handle): "Alice" and "alice" cannot both exist). display_name: 1-64 characters,
-- trimmed by the API, no control characters. The API validates both first (a 422); the
-- checks keep any other writer to the same rules.
ALTER TABLE users ADD COLUMN handle TEXT NULL
    CONSTRAINT users_handle_shape CHECK (handle ~ '^[A-Za-z0-9_]{3,30}$');
ALTER TABLE users ADD COLUMN display_name TEXT NULL
    CONSTRAINT users_display_name_shape CHECK (char_length(display_name) BETWEEN 1 AND 64
                                               AND display_name !~ '[\x01-\x1f\x7f-\x9f]');
CREATE UNIQUE INDEX users_handle_lower ON users (lower(handle));

-- users is already captured (0001: REPLICA IDENTITY FULL, in the publication): the new
-- columns reach <prefix>.public.users with every change, and the fan-out keeps the read
-- path's copy of them (Cassandra user_profiles, 0014_user_profiles.cql).
