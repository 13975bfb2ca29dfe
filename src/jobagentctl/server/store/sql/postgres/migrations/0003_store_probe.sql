-- jobagentctl schema v3 (PostgreSQL): the table of SQLite's readiness probe after a failed
-- write, kept in both dialects so that their schemas stay the same (unused here: a failing
-- write on PostgreSQL fails its request, and reachability is readiness enough).

CREATE TABLE store_probe (
    id   integer PRIMARY KEY,
    pad  bytea NOT NULL
);
