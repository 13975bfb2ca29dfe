-- jobagentctl schema v1 (PostgreSQL). The tables of the protocol (docs/protocol.md); job_agent also keeps the agent's
-- metadata. Times are timestamptz from now(); ids uuid; JSON jsonb.

CREATE TABLE workspace (
    id          uuid PRIMARY KEY,
    name        text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE job_agent (
    id            uuid PRIMARY KEY,
    workspace_id  uuid NOT NULL REFERENCES workspace (id) ON DELETE CASCADE,
    name          text NOT NULL,
    type          text NOT NULL,
    config        jsonb NOT NULL DEFAULT '{}',
    metadata      jsonb NOT NULL DEFAULT '{}',
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX job_agent_workspace_idx ON job_agent (workspace_id, created_at);

-- The queue churns (every claim, completion and requeue rewrites a row), so vacuum and analyze
-- it after a small fraction of changes rather than the default 20 %; fillfactor leaves room on
-- each page for the next version of a row.
CREATE TABLE job (
    id                uuid PRIMARY KEY,
    job_agent_id      uuid NOT NULL REFERENCES job_agent (id) ON DELETE CASCADE,
    status            text NOT NULL,
    job_agent_config  jsonb NOT NULL DEFAULT '{}',
    dispatch_context  jsonb NOT NULL DEFAULT '{}',
    metadata          jsonb NOT NULL DEFAULT '{}',
    external_id       text,
    message           text,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    started_at        timestamptz,
    completed_at      timestamptz
) WITH (
    fillfactor = 90,
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_threshold = 200,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_analyze_threshold = 200,
    autovacuum_vacuum_cost_delay = 0
);

-- claim-next: the oldest queued job of an agent is the first entry of its (agent, 'queued')
-- range.
CREATE INDEX job_agent_status_created_idx ON job (job_agent_id, status, created_at, id);
-- inspect-claims over a whole workspace: only in-flight jobs, a small partial index.
CREATE INDEX job_in_progress_idx ON job (job_agent_id) WHERE status = 'inProgress';

-- Lease state, one narrow row per in-flight leased job. Heartbeats only rewrite
-- claim_expires_at (and lease_seconds), which no index covers, and fillfactor 70 leaves room
-- on the page: heartbeats stay HOT updates. Deliberately NO index on claim_expires_at: it
-- would make every heartbeat a non-HOT update, and the reaper's sequential scan of this small
-- table is cheaper.
CREATE TABLE job_claim (
    job_id            uuid PRIMARY KEY REFERENCES job (id) ON DELETE CASCADE,
    job_agent_id      uuid NOT NULL,
    claimed_at        timestamptz NOT NULL,
    claim_expires_at  timestamptz NOT NULL,
    claim_id          uuid NOT NULL,
    lease_seconds     integer NOT NULL,
    attempt           integer NOT NULL
) WITH (
    fillfactor = 70,
    autovacuum_vacuum_scale_factor = 0.05,
    autovacuum_vacuum_threshold = 100,
    autovacuum_vacuum_cost_delay = 0
);

CREATE TABLE job_attempt (
    job_id        uuid NOT NULL REFERENCES job (id) ON DELETE CASCADE,
    attempt       integer NOT NULL,
    claim_id      uuid,
    job_agent_id  uuid NOT NULL,
    claimed_at    timestamptz NOT NULL,
    ended_at      timestamptz,
    outcome       text CHECK (outcome IN ('completed', 'expired', 'released', 'cancelled')),
    PRIMARY KEY (job_id, attempt)
);

CREATE TABLE api_key (
    id            uuid PRIMARY KEY,
    workspace_id  uuid NOT NULL REFERENCES workspace (id) ON DELETE CASCADE,
    job_agent_id  uuid REFERENCES job_agent (id) ON DELETE CASCADE,
    prefix        text NOT NULL UNIQUE,
    secret_hash   text NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    revoked_at    timestamptz
);
