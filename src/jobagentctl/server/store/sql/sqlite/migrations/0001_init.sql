-- jobagentctl schema v1 (SQLite). Times are REAL unix epoch seconds from the database clock,
-- ids are UUID text, JSON is text. The tables of the protocol (docs/protocol.md); job_agent also keeps the agent's metadata.

CREATE TABLE workspace (
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL,
    created_at  REAL NOT NULL
);

CREATE TABLE job_agent (
    id            TEXT PRIMARY KEY,
    workspace_id  TEXT NOT NULL REFERENCES workspace (id) ON DELETE CASCADE,
    name          TEXT NOT NULL,
    type          TEXT NOT NULL,
    config        TEXT NOT NULL DEFAULT '{}',
    metadata      TEXT NOT NULL DEFAULT '{}',
    created_at    REAL NOT NULL,
    updated_at    REAL NOT NULL
);

CREATE INDEX job_agent_workspace_idx ON job_agent (workspace_id, created_at);

-- Deleting an agent deletes its jobs (and with them claims and attempts): a job is reachable
-- only through its agent's workspace.
CREATE TABLE job (
    id                TEXT PRIMARY KEY,
    job_agent_id      TEXT NOT NULL REFERENCES job_agent (id) ON DELETE CASCADE,
    status            TEXT NOT NULL,
    job_agent_config  TEXT NOT NULL DEFAULT '{}',
    dispatch_context  TEXT NOT NULL DEFAULT '{}',
    metadata          TEXT NOT NULL DEFAULT '{}',
    external_id       TEXT,
    message           TEXT,
    created_at        REAL NOT NULL,
    updated_at        REAL NOT NULL,
    started_at        REAL,
    completed_at      REAL
);

CREATE INDEX job_agent_status_created_idx ON job (job_agent_id, status, created_at);
CREATE INDEX job_status_idx ON job (status);

CREATE TABLE job_claim (
    job_id            TEXT PRIMARY KEY REFERENCES job (id) ON DELETE CASCADE,
    job_agent_id      TEXT NOT NULL,
    claimed_at        REAL NOT NULL,
    claim_expires_at  REAL NOT NULL,
    claim_id          TEXT NOT NULL,
    lease_seconds     INTEGER NOT NULL,
    attempt           INTEGER NOT NULL
);

CREATE TABLE job_attempt (
    job_id        TEXT NOT NULL REFERENCES job (id) ON DELETE CASCADE,
    attempt       INTEGER NOT NULL,
    claim_id      TEXT,
    job_agent_id  TEXT NOT NULL,
    claimed_at    REAL NOT NULL,
    ended_at      REAL,
    outcome       TEXT CHECK (outcome IN ('completed', 'expired', 'released', 'cancelled')),
    PRIMARY KEY (job_id, attempt)
);

CREATE TABLE api_key (
    id            TEXT PRIMARY KEY,
    workspace_id  TEXT NOT NULL REFERENCES workspace (id) ON DELETE CASCADE,
    job_agent_id  TEXT REFERENCES job_agent (id) ON DELETE CASCADE,
    prefix        TEXT NOT NULL UNIQUE,
    secret_hash   TEXT NOT NULL,
    created_at    REAL NOT NULL,
    revoked_at    REAL
);
