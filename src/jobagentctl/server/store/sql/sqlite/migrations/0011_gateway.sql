-- compat: expand
-- jobagentctl schema (SQLite): gateway mode (docs/gateway.md). gateway_upstream records that a
-- workspace of ours mirrors a workspace of ctrlplane's (same id) and where its API is; the
-- upstream_op table is the outbox: what the gateway is about to do upstream (a report to
-- forward, a job to put back to queued), written in the transaction of the local change
-- before the request to ctrlplane, retried until ctrlplane took it. job_claim.delivering marks
-- a claim whose holder's report was accepted and is not yet delivered: the gateway's reaper
-- never takes it. A release without gateway mode never reads these.
CREATE TABLE gateway_upstream (
    workspace_id  TEXT PRIMARY KEY REFERENCES workspace (id) ON DELETE CASCADE,
    upstream_url  TEXT NOT NULL,
    created_at    REAL NOT NULL
);

CREATE TABLE upstream_op (
    id            TEXT PRIMARY KEY,
    workspace_id  TEXT NOT NULL,
    job_id        TEXT NOT NULL,
    kind          TEXT NOT NULL CHECK (kind IN ('report', 'requeue')),
    claim_id      TEXT NOT NULL,
    payload       TEXT NOT NULL DEFAULT '{}',
    created_at    REAL NOT NULL,
    tries         INTEGER NOT NULL DEFAULT 0,
    last_error    TEXT,
    next_try_at   REAL NOT NULL,
    done_at       REAL,
    UNIQUE (job_id, claim_id, kind)
);

CREATE INDEX upstream_op_pending_idx ON upstream_op (next_try_at) WHERE done_at IS NULL;

ALTER TABLE job_claim ADD COLUMN delivering INTEGER NOT NULL DEFAULT 0;
