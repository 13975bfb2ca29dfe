-- compat: expand
-- jobagentctl schema (PostgreSQL): revoked claims and agent presence. Additive only: new
-- tables, which the previous release neither reads nor writes.

-- A claim an operator ended (a status change without the claim id, e.g. `requeue`, `cancel`)
-- while its agent still held it: its command may still be stopping. While a row is here the
-- job is not claimable; the row goes when the holder reports with that claim id (its command
-- gone), when its lease runs out (the reaper), or with `requeue --force`. No foreign key, as
-- job_claim has none (v4): the store never deletes a job row.
CREATE TABLE job_revoked_claim (
    job_id            uuid PRIMARY KEY,
    job_agent_id      uuid NOT NULL,
    claim_id          uuid NOT NULL,
    attempt           integer NOT NULL,
    claimed_at        timestamptz NOT NULL,
    claim_expires_at  timestamptz NOT NULL,
    lease_seconds     integer NOT NULL,
    revoked_at        timestamptz NOT NULL
);

-- When each agent was last seen (any request made for it), written at most once per agent per
-- presence interval by each server process: off the job and claim tables.
CREATE TABLE job_agent_presence (
    job_agent_id  uuid PRIMARY KEY REFERENCES job_agent (id) ON DELETE CASCADE,
    last_seen_at  timestamptz NOT NULL
);
