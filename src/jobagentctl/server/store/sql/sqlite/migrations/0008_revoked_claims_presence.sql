-- compat: expand
-- jobagentctl schema (SQLite): revoked claims and agent presence. Additive only: new tables,
-- which the previous release neither reads nor writes.

-- A claim an operator ended (a status change without the claim id, e.g. `requeue`, `cancel`)
-- while its agent still held it: its command may still be stopping. While a row is here the
-- job is not claimable; the row goes when the holder reports with that claim id (its command
-- gone), when its lease runs out (the reaper), or with `requeue --force`.
CREATE TABLE job_revoked_claim (
    job_id            TEXT PRIMARY KEY REFERENCES job (id) ON DELETE CASCADE,
    job_agent_id      TEXT NOT NULL,
    claim_id          TEXT NOT NULL,
    attempt           INTEGER NOT NULL,
    claimed_at        REAL NOT NULL,
    claim_expires_at  REAL NOT NULL,
    lease_seconds     INTEGER NOT NULL,
    revoked_at        REAL NOT NULL
);

-- When each agent was last seen (any request made for it), written at most once per agent per
-- presence interval by each server process: off the job and claim tables.
CREATE TABLE job_agent_presence (
    job_agent_id  TEXT PRIMARY KEY REFERENCES job_agent (id) ON DELETE CASCADE,
    last_seen_at  REAL NOT NULL
);
