-- compat: expand
-- jobagentctl schema (PostgreSQL): the live output of job attempts, off the hot job and
-- job_claim tables (an append never touches their rows, so it takes none of their locks and
-- adds no dead tuples to them). Additive only: a previous release runs unchanged on this
-- schema (it never reads these tables).

-- One row per stored chunk. seq counts an attempt's chunks from 1; byte_offset is where the
-- chunk begins among every byte appended to the attempt (markers included), so a gap between
-- one chunk's end and the next one's offset is output cut by the cap.
CREATE TABLE job_log (
    job_id        uuid NOT NULL,
    attempt       integer NOT NULL,
    seq           integer NOT NULL,
    workspace_id  uuid NOT NULL,
    byte_offset   bigint NOT NULL,
    stream        text NOT NULL CHECK (stream IN ('stdout', 'stderr', 'marker')),
    at            timestamptz NOT NULL,
    data          bytea NOT NULL,
    PRIMARY KEY (job_id, attempt, seq)
);

-- One row per attempt with a log: the next chunk's seq and offset, what the cap cut and where
-- its marker sits, its first and last append, and when retention deleted the chunks (a read
-- then answers "expired"). Retention counts from the attempt's end (job_attempt.ended_at);
-- created_at, never updated, is its indexed prefilter (an attempt that ended long enough ago
-- began before that too), so an append's update of this row changes no indexed column.
CREATE TABLE job_log_attempt (
    job_id          uuid NOT NULL,
    attempt         integer NOT NULL,
    workspace_id    uuid NOT NULL,
    next_seq        integer NOT NULL,
    appended_bytes  bigint NOT NULL,
    stored_bytes    bigint NOT NULL,
    cut_bytes       bigint NOT NULL DEFAULT 0,
    marker_seq      integer,
    created_at      timestamptz NOT NULL,
    last_at         timestamptz NOT NULL,
    expired_at      timestamptz,
    PRIMARY KEY (job_id, attempt)
) WITH (fillfactor = 80);  -- room on the page: each append's update stays a HOT update

CREATE INDEX job_log_attempt_live_idx ON job_log_attempt (created_at) WHERE expired_at IS NULL;
