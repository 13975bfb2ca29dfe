-- Named statements of the SQLite store. A block runs from its "-- name: x" line to the next.
-- The database clock: (julianday('now') - 2440587.5) * 86400.0 is unix epoch seconds with
-- millisecond resolution (SQLite 3.40 has no unixepoch('subsec')). Where PostgreSQL does an
-- operation in one CTE, SQLite's block is a chain of statements (separated by ";") that the
-- connector runs in one BEGIN IMMEDIATE transaction, which holds the database's single write
-- lock: each statement sees the parameters plus the columns of the first row of every
-- statement before it.
-- The store's other statements are in the other .sql files of this directory (one per
-- concern); a name is defined once among them.

-- name: migrate_lock
BEGIN IMMEDIATE

-- name: migrations_table
CREATE TABLE IF NOT EXISTS schema_migrations (
    version     INTEGER PRIMARY KEY,
    applied_at  REAL NOT NULL
)

-- name: applied_versions
-- With the compat header each version was applied with (NULL before the column).
SELECT version, compat FROM schema_migrations ORDER BY version

-- name: compat_column
-- Whether schema_migrations has its compat column (added by a release of 0.4.0 on).
SELECT count(*) AS found FROM pragma_table_info('schema_migrations') WHERE name = 'compat'

-- name: add_compat_column
-- Nullable: the previous release's record_migration, which names no compat, still runs.
ALTER TABLE schema_migrations ADD COLUMN compat TEXT

-- name: write_probe
-- Readiness after a failed write (disk full…): rewrite 64 KiB of random bytes, which needs
-- that much new room in the WAL.
INSERT OR REPLACE INTO store_probe (id, pad) VALUES (1, randomblob(65536))

-- name: record_migration
INSERT INTO schema_migrations (version, applied_at, compat)
VALUES (:version, (julianday('now') - 2440587.5) * 86400.0, :compat)
