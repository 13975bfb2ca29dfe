-- compat: expand
-- jobagentctl schema (SQLite): the live output of job attempts, off the hot job and job_claim
-- tables. Additive only: a previous release runs unchanged on this schema (it never reads
-- these tables).

-- One row per stored chunk. seq counts an attempt's chunks from 1; byte_offset is where the
-- chunk begins among every byte appended to the attempt (markers included), so a gap between
-- one chunk's end and the next one's offset is output cut by the cap.
CREATE TABLE job_log (
    job_id        TEXT NOT NULL,
    attempt       INTEGER NOT NULL,
    seq           INTEGER NOT NULL,
    workspace_id  TEXT NOT NULL,
    byte_offset   INTEGER NOT NULL,
    stream        TEXT NOT NULL CHECK (stream IN ('stdout', 'stderr', 'marker')),
    at            REAL NOT NULL,
    data          BLOB NOT NULL,
    PRIMARY KEY (job_id, attempt, seq)
);

-- One row per attempt with a log: the next chunk's seq and offset, what the cap cut and where
-- its marker sits, its first and last append, and when retention deleted the chunks (a read
-- then answers "expired"). Retention counts from the attempt's end (job_attempt.ended_at);
-- created_at, never updated, is its indexed prefilter (an attempt that ended long enough ago
-- began before that too), so an append's update of this row changes no indexed column.
CREATE TABLE job_log_attempt (
    job_id          TEXT NOT NULL,
    attempt         INTEGER NOT NULL,
    workspace_id    TEXT NOT NULL,
    next_seq        INTEGER NOT NULL,
    appended_bytes  INTEGER NOT NULL,
    stored_bytes    INTEGER NOT NULL,
    cut_bytes       INTEGER NOT NULL DEFAULT 0,
    marker_seq      INTEGER,
    created_at      REAL NOT NULL,
    last_at         REAL NOT NULL,
    expired_at      REAL,
    PRIMARY KEY (job_id, attempt)
);

CREATE INDEX job_log_attempt_live_idx ON job_log_attempt (created_at) WHERE expired_at IS NULL;
