-- compat: expand
-- jobagentctl schema (PostgreSQL): gateway mode (docs/gateway.md). gateway_upstream records
-- that a workspace of ours mirrors a workspace of ctrlplane's (same id) and where its API is;
-- the upstream_op table is the outbox: what the gateway is about to do upstream (a report to
-- forward, a job to put back to queued), written in the transaction of the local change
-- before the request to ctrlplane, retried until ctrlplane took it (replicas share the work:
-- rows are taken with SKIP LOCKED). job_claim.delivering marks a claim whose holder's report
-- was accepted and is not yet delivered: the gateway's reaper never takes it. A column with a
-- constant default is a catalogue change only; a release without gateway mode never reads it.
CREATE TABLE gateway_upstream (
    workspace_id  uuid PRIMARY KEY REFERENCES workspace (id) ON DELETE CASCADE,
    upstream_url  text NOT NULL,
    created_at    timestamptz NOT NULL
);

CREATE TABLE upstream_op (
    id            uuid PRIMARY KEY,
    workspace_id  uuid NOT NULL,
    job_id        uuid NOT NULL,
    kind          text NOT NULL CHECK (kind IN ('report', 'requeue')),
    claim_id      uuid NOT NULL,
    payload       jsonb NOT NULL DEFAULT '{}',
    created_at    timestamptz NOT NULL,
    tries         integer NOT NULL DEFAULT 0,
    last_error    text,
    next_try_at   timestamptz NOT NULL,
    done_at       timestamptz,
    UNIQUE (job_id, claim_id, kind)
);

CREATE INDEX upstream_op_pending_idx ON upstream_op (next_try_at) WHERE done_at IS NULL;

ALTER TABLE job_claim ADD COLUMN delivering boolean NOT NULL DEFAULT false;
