-- Named statements of the PostgreSQL store. A block runs from its "-- name: x" line to the next.
-- Every lease time is now(): the database clock, one value per statement (autocommit) or per
-- transaction. Nullable parameters carry casts so PostgreSQL never has to guess their type.
-- The store's other statements are in the other .sql files of this directory (one per
-- concern); a name is defined once among them.

-- name: migrate_lock
-- Replicas starting together migrate one after the other; the lock ends with the transaction.
SELECT pg_advisory_xact_lock(7236501981004)

-- name: unbounded
SET LOCAL statement_timeout = 0

-- name: migrations_table
CREATE TABLE IF NOT EXISTS schema_migrations (
    version     integer PRIMARY KEY,
    applied_at  timestamptz NOT NULL DEFAULT now()
)

-- name: applied_versions
-- With the compat header each version was applied with (NULL before the column).
SELECT version, compat FROM schema_migrations ORDER BY version

-- name: compat_column
-- Whether schema_migrations has its compat column (added by a release of 0.4.0 on).
SELECT count(*) AS found FROM information_schema.columns
WHERE table_schema = current_schema() AND table_name = 'schema_migrations'
  AND column_name = 'compat'

-- name: add_compat_column
-- Nullable: the previous release's record_migration, which names no compat, still runs.
ALTER TABLE schema_migrations ADD COLUMN compat text

-- name: write_probe
-- (SQLite's readiness probe after a failed write; unused on PostgreSQL.)
INSERT INTO store_probe (id, pad) VALUES (1, decode(repeat('00', 65536), 'hex'))
ON CONFLICT (id) DO UPDATE SET pad = excluded.pad

-- name: record_migration
INSERT INTO schema_migrations (version, applied_at, compat)
VALUES (%(version)s, now(), %(compat)s)

-- name: ping
SELECT 1 AS ok
