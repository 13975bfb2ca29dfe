-- Named statements of the SQLite store. A block runs from its "-- name: x" line to the next.
-- The database clock: (julianday('now') - 2440587.5) * 86400.0 is unix epoch seconds with
-- millisecond resolution (SQLite 3.40 has no unixepoch('subsec')). Where PostgreSQL does an
-- operation in one CTE, SQLite's block is a chain of statements (separated by ";") that the
-- connector runs in one BEGIN IMMEDIATE transaction, which holds the database's single write
-- lock: each statement sees the parameters plus the columns of the first row of every
-- statement before it.

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

-- name: create_workspace
INSERT INTO workspace (id, name, slug, created_at)
VALUES (:id, :name, :slug, (julianday('now') - 2440587.5) * 86400.0)

-- name: get_workspace
SELECT id, name, slug, created_at FROM workspace WHERE id = :id

-- name: get_workspace_by_slug
SELECT id, name, slug, created_at FROM workspace WHERE slug = :slug

-- name: workspace_exists
SELECT 1 AS found FROM workspace WHERE id = :id

-- name: create_api_key
INSERT INTO api_key (id, workspace_id, job_agent_id, prefix, secret_hash, created_at)
SELECT :id, w.id, :job_agent_id, :prefix, :secret_hash, (julianday('now') - 2440587.5) * 86400.0
FROM workspace AS w
WHERE w.id = :workspace_id
  AND (:job_agent_id IS NULL OR EXISTS (
        SELECT 1 FROM job_agent AS a WHERE a.id = :job_agent_id AND a.workspace_id = w.id))
RETURNING id

-- name: get_api_key
SELECT id, workspace_id, job_agent_id, prefix, secret_hash, created_at, revoked_at
FROM api_key
WHERE prefix = :prefix

-- name: revoke_api_key
UPDATE api_key SET revoked_at = (julianday('now') - 2440587.5) * 86400.0
WHERE id = :id AND revoked_at IS NULL
RETURNING id

-- name: upsert_agent
-- The WHERE of DO UPDATE keeps an id of another workspace untouched (no row comes back).
INSERT INTO job_agent (id, workspace_id, name, type, config, metadata, created_at, updated_at)
VALUES (:id, :workspace_id, :name, :type, :config, COALESCE(:metadata, '{}'),
        (julianday('now') - 2440587.5) * 86400.0, (julianday('now') - 2440587.5) * 86400.0)
ON CONFLICT (id) DO UPDATE
SET name = excluded.name,
    type = excluded.type,
    config = excluded.config,
    metadata = COALESCE(:metadata, job_agent.metadata),
    updated_at = excluded.updated_at
WHERE job_agent.workspace_id = excluded.workspace_id
RETURNING *

-- name: get_agent
SELECT * FROM job_agent WHERE id = :id AND workspace_id = :workspace_id

-- fragment: agent_presence
-- An agent's presence, after "SELECT a.*, …": when it was last seen, what it holds (its jobs in
-- progress and its revoked claims not let go yet), and its state — offline (not seen within
-- the window, or never: whatever it holds, a dead agent is not busy), busy (holding
-- something), idle.
           p.last_seen_at,
           (SELECT COUNT(*) FROM job AS j
             WHERE j.job_agent_id = a.id AND j.status = 'inProgress')
           + (SELECT COUNT(*) FROM job_revoked_claim AS r WHERE r.job_agent_id = a.id)
               AS held_claims,
           CASE WHEN p.last_seen_at IS NULL
                     OR p.last_seen_at < (julianday('now') - 2440587.5) * 86400.0 - :window
                    THEN 'offline'
                WHEN EXISTS (SELECT 1 FROM job AS j
                             WHERE j.job_agent_id = a.id AND j.status = 'inProgress')
                     OR EXISTS (SELECT 1 FROM job_revoked_claim AS r
                                WHERE r.job_agent_id = a.id) THEN 'busy'
                ELSE 'idle' END AS state
    FROM job_agent AS a
    LEFT JOIN job_agent_presence AS p ON p.job_agent_id = a.id

-- name: list_agents
-- rowid breaks ties of equal millisecond timestamps in insertion order. With each agent's
-- presence (fragment agent_presence), filtered by :state when not NULL.
SELECT *, COUNT(*) OVER () AS total
FROM (
    SELECT a.*, a.rowid AS agent_seq,
-- include: agent_presence
    WHERE a.workspace_id = :workspace_id
) AS agents
WHERE :state IS NULL OR state = :state
ORDER BY created_at, agent_seq
LIMIT :limit OFFSET :offset

-- name: delete_agent
DELETE FROM job_agent WHERE id = :id AND workspace_id = :workspace_id RETURNING id

-- name: create_job
INSERT INTO job (id, workspace_id, job_agent_id, status, job_agent_config, dispatch_context,
                 metadata, created_at, updated_at)
SELECT :id, a.workspace_id, a.id, 'queued', COALESCE(:job_agent_config, a.config), :dispatch_context, :metadata,
       (julianday('now') - 2440587.5) * 86400.0, (julianday('now') - 2440587.5) * 86400.0
FROM job_agent AS a
WHERE a.id = :agent_id AND a.workspace_id = :workspace_id
RETURNING *

-- name: get_job
SELECT j.*,
       EXISTS (SELECT 1 FROM job_claim AS c WHERE c.job_id = j.id)
       OR EXISTS (SELECT 1 FROM job_revoked_claim AS r WHERE r.job_id = j.id) AS claim_held
FROM job AS j
WHERE j.id = :job_id AND j.workspace_id = :workspace_id
  AND (:agent_scope IS NULL OR j.job_agent_id = :agent_scope)

-- fragment: jobs_listed
-- The jobs a listing matches (job as j): the workspace's, of an agent and statuses if given.
    j.workspace_id = :workspace_id
    AND (:agent_id IS NULL OR j.job_agent_id = :agent_id)
    AND (:statuses IS NULL OR j.status IN (SELECT value FROM json_each(:statuses)))

-- name: list_jobs
-- rowid breaks ties of equal millisecond timestamps in insertion order. A keyset cursor
-- (:after_at, :after_key: the last row of the previous page) starts the page after that row;
-- total counts every matching job, before and after it (counted once, apart from the page).
SELECT j.*, j.rowid AS list_key,
       (SELECT count(*) FROM job AS j WHERE
-- include: jobs_listed
       ) AS total
FROM job AS j
WHERE
-- include: jobs_listed
  AND (:after_at IS NULL OR (j.created_at, j.rowid) < (:after_at, :after_key))
ORDER BY j.created_at DESC, j.rowid DESC
LIMIT :limit OFFSET :offset

-- name: job_claim_state
-- The failure paths: does the job exist in scope, what is its status, who holds the claim.
SELECT j.status, c.claim_id, c.attempt,
       EXISTS (SELECT 1 FROM job_revoked_claim AS r WHERE r.job_id = j.id) AS revoked_held,
       (SELECT r.claim_id FROM job_revoked_claim AS r WHERE r.job_id = j.id) AS revoked_claim_id
FROM job AS j
LEFT JOIN job_claim AS c ON c.job_id = j.id
WHERE j.id = :job_id AND j.workspace_id = :workspace_id
  AND (:agent_scope IS NULL OR j.job_agent_id = :agent_scope)

-- name: queued_exists
-- A queued job whose revoked claim is still held is not claimable yet: it does not count.
SELECT 1 AS found FROM job
WHERE job_agent_id = :agent_id AND status = 'queued'
  AND NOT EXISTS (SELECT 1 FROM job_revoked_claim AS r WHERE r.job_id = job.id)
LIMIT 1

-- name: queued_counts
-- The long-poll poller's one question for every agent with waiters (:agents, a JSON array of
-- ids): how many jobs each has queued, counting at most :cap (the waiters there can be).
SELECT a.value AS job_agent_id,
       (SELECT count(*) FROM (SELECT 1 FROM job
                              WHERE job_agent_id = a.value AND status = 'queued'
                                AND NOT EXISTS (SELECT 1 FROM job_revoked_claim AS r
                                                WHERE r.job_id = job.id)
                              LIMIT :cap)) AS jobs
FROM json_each(:agents) AS a

-- fragment: claim_tail
-- What both claims do after the UPDATE that flipped the job (its row is in the parameters):
-- the claim's attempt and time, the lease when there is one (the job and the claim agree on
-- the time to the millisecond), and for an unleased (V1) claim, which has no claim row, its
-- open attempt row (a leased attempt's row is written once, when it ends, from the claim row).
SELECT :attempts AS attempt, :started_at AS claimed_at,
       CASE WHEN :lease_seconds IS NULL THEN NULL ELSE :new_claim_id END AS claim_id;
INSERT INTO job_claim (job_id, job_agent_id, claimed_at, claim_expires_at, claim_id,
                       lease_seconds, attempt)
SELECT :id, :job_agent_id, :claimed_at, :claimed_at + :lease_seconds, :claim_id,
       :lease_seconds, :attempt
WHERE :lease_seconds IS NOT NULL
RETURNING claim_expires_at, lease_seconds;
INSERT INTO job_attempt (job_id, attempt, claim_id, job_agent_id, claimed_at)
SELECT :id, :attempt, NULL, :job_agent_id, :claimed_at
WHERE :lease_seconds IS NULL

-- name: claim_job
-- Flip the job (only if still queued) and count the attempt on it, then claim_tail.
UPDATE job
SET status = 'inProgress',
    started_at = (julianday('now') - 2440587.5) * 86400.0,
    updated_at = (julianday('now') - 2440587.5) * 86400.0,
    attempts = attempts + 1
WHERE id = :job_id AND job_agent_id = :agent_id AND status = 'queued'
  AND EXISTS (SELECT 1 FROM job_agent AS a WHERE a.id = :agent_id AND a.workspace_id = :workspace_id)
  AND NOT EXISTS (SELECT 1 FROM job_revoked_claim AS r WHERE r.job_id = :job_id)
RETURNING *;
-- include: claim_tail

-- fragment: claim_next_chain
UPDATE job
SET status = 'inProgress',
    started_at = (julianday('now') - 2440587.5) * 86400.0,
    updated_at = (julianday('now') - 2440587.5) * 86400.0,
    attempts = attempts + 1
WHERE id = (
        SELECT q.id FROM job AS q
        WHERE q.job_agent_id = :agent_id AND q.status = 'queued'
          AND NOT EXISTS (SELECT 1 FROM job_revoked_claim AS r WHERE r.job_id = q.id)
        ORDER BY q.created_at, q.rowid
        LIMIT 1)
  AND EXISTS (SELECT 1 FROM job_agent AS a WHERE a.id = :agent_id AND a.workspace_id = :workspace_id)
RETURNING *;
-- include: claim_tail

-- name: claim_next
-- As claim_job, for the agent's oldest queued job.
-- include: claim_next_chain

-- name: claim_batch
-- The same chain: a batch is it run again in one transaction until it claims nothing
-- (SqliteConnector.each).
-- include: claim_next_chain

-- name: heartbeat
-- :last_output_at (epoch seconds, the agent's clock) is kept when given, never later than now.
UPDATE job_claim
SET lease_seconds = COALESCE(:lease_seconds, lease_seconds),
    claim_expires_at = (julianday('now') - 2440587.5) * 86400.0
                       + COALESCE(:lease_seconds, lease_seconds),
    last_output_at = COALESCE(MIN(:last_output_at, (julianday('now') - 2440587.5) * 86400.0),
                              last_output_at)
WHERE job_id = :job_id
  AND (:claim_id IS NULL OR claim_id = :claim_id)
  AND (:agent_scope IS NULL OR job_agent_id = :agent_scope)
  AND EXISTS (SELECT 1 FROM job AS j
              WHERE j.id = job_claim.job_id AND j.workspace_id = :workspace_id)
RETURNING job_id, claim_id, attempt, lease_seconds, claim_expires_at, job_agent_id

-- name: lock_job
-- SQLite's lock is the whole database: the write transaction itself.
BEGIN IMMEDIATE

-- name: status_context
SELECT j.*,
       c.claim_id AS current_claim_id,
       c.attempt AS current_attempt,
       (SELECT t.outcome FROM job_attempt AS t
        WHERE t.job_id = j.id AND t.claim_id = :claim_id) AS given_claim_outcome
FROM job AS j
LEFT JOIN job_claim AS c ON c.job_id = j.id
WHERE j.id = :job_id AND j.workspace_id = :workspace_id
  AND (:agent_scope IS NULL OR j.job_agent_id = :agent_scope)

-- name: apply_status
-- Write the status (a terminal one sets completed_at, any other clears it: the job is no longer
-- finished; started_at is the latest claim's); away from inProgress also end the lease and close the attempt (at the
-- updated_at just written, so the job and its attempt agree to the millisecond).
-- :merged_metadata is the merged object (read under the write lock by status_context).
UPDATE job
SET status = :status,
    updated_at = (julianday('now') - 2440587.5) * 86400.0,
    message = COALESCE(:message, message),
    external_id = COALESCE(:external_id, external_id),
    metadata = COALESCE(:merged_metadata, metadata),
    started_at = CASE WHEN :status = 'inProgress' AND status <> 'inProgress'
                      THEN (julianday('now') - 2440587.5) * 86400.0 ELSE started_at END,
    completed_at = CASE WHEN :terminal THEN (julianday('now') - 2440587.5) * 86400.0 END
WHERE id = :job_id
RETURNING *;
-- A leased attempt's row is written once, as it ends, from the claim row.
INSERT INTO job_attempt (job_id, attempt, claim_id, job_agent_id, claimed_at, ended_at, outcome)
SELECT c.job_id, c.attempt, c.claim_id, c.job_agent_id, c.claimed_at, :updated_at, :outcome
FROM job_claim AS c
WHERE c.job_id = :job_id AND :status <> 'inProgress'
ON CONFLICT (job_id, attempt) DO UPDATE
SET ended_at = excluded.ended_at, outcome = excluded.outcome;
-- The claim ended here without its holder (:revoke: no claim id, no force): kept as revoked
-- (the job not claimable) until the holder reports with it or its lease runs out.
INSERT INTO job_revoked_claim (job_id, job_agent_id, claim_id, attempt, claimed_at,
                               claim_expires_at, lease_seconds, revoked_at)
SELECT c.job_id, c.job_agent_id, c.claim_id, c.attempt, c.claimed_at, c.claim_expires_at,
       c.lease_seconds, :updated_at
FROM job_claim AS c
WHERE c.job_id = :job_id AND :status <> 'inProgress' AND :revoke
ON CONFLICT (job_id) DO UPDATE
SET job_agent_id = excluded.job_agent_id, claim_id = excluded.claim_id,
    attempt = excluded.attempt, claimed_at = excluded.claimed_at,
    claim_expires_at = excluded.claim_expires_at, lease_seconds = excluded.lease_seconds,
    revoked_at = excluded.revoked_at;
DELETE FROM job_revoked_claim WHERE job_id = :job_id AND :force;
DELETE FROM job_claim WHERE job_id = :job_id AND :status <> 'inProgress';
UPDATE job_attempt
SET ended_at = :updated_at, outcome = :outcome
WHERE job_id = :job_id AND ended_at IS NULL AND :status <> 'inProgress'

-- name: finish_claimed
-- The common status update (the holder of the claim moves its job out of inProgress) without
-- reading first: delete the claim row (the fence: this claim id, the job in scope and
-- inProgress), set the status, write the attempt's row once from the claim row. No row back =
-- refused or a repeat: only then does the store read why (the locked path). The store takes
-- this path only without a metadata patch (SQLite merges metadata in Python).
DELETE FROM job_claim
WHERE job_id = :job_id AND claim_id = :claim_id
  AND EXISTS (SELECT 1 FROM job AS j
              WHERE j.id = job_claim.job_id AND j.workspace_id = :workspace_id
                AND j.status = 'inProgress'
                AND (:agent_scope IS NULL OR j.job_agent_id = :agent_scope))
RETURNING attempt, job_agent_id AS claim_agent_id, claimed_at;
UPDATE job
SET status = :status,
    updated_at = (julianday('now') - 2440587.5) * 86400.0,
    message = COALESCE(:message, message),
    external_id = COALESCE(:external_id, external_id),
    completed_at = CASE WHEN :terminal THEN (julianday('now') - 2440587.5) * 86400.0 END
WHERE id = :job_id
RETURNING id, status, job_agent_id, updated_at;
INSERT INTO job_attempt (job_id, attempt, claim_id, job_agent_id, claimed_at, ended_at, outcome)
VALUES (:job_id, :attempt, :claim_id, :claim_agent_id, :claimed_at, :updated_at, :outcome)

-- fragment: reap_expired
-- The claims a reap takes: expired before n.now, the first :batch_size by job id. Outage
-- grace (reaper.py): a lease that ran out since the outage began is spared until one
-- heartbeat interval after the store came back: a third of the lease within
-- [:heartbeat_min, :heartbeat_max] seconds, as models.heartbeat_interval says.
WHERE c.claim_expires_at < n.now
  AND NOT (c.claim_expires_at >= n.now - :outage_began_ago
           AND :outage_ended_ago
               < MIN(:heartbeat_max, MAX(:heartbeat_min, c.lease_seconds / 3.0)))
ORDER BY c.job_id LIMIT :batch_size

-- fragment: reap_batch
SELECT c.job_id FROM job_claim AS c, (SELECT :now AS now) AS n
-- include: reap_expired

-- name: reap
-- One batch, the same set in every statement: :now is read once (the first statement), and the
-- write lock keeps job_claim unchanged until the last statement deletes the batch. The N-th
-- expiry with N >= max_reclaims fails the job instead of requeueing it.
SELECT n.now
FROM (SELECT (julianday('now') - 2440587.5) * 86400.0 AS now) AS n
WHERE EXISTS (SELECT 1 FROM job_claim AS c
-- include: reap_expired
);
-- The expired attempts' rows, written once from their claim rows.
INSERT INTO job_attempt (job_id, attempt, claim_id, job_agent_id, claimed_at, ended_at, outcome)
SELECT c.job_id, c.attempt, c.claim_id, c.job_agent_id, c.claimed_at, :now, 'expired'
FROM job_claim AS c
WHERE c.job_id IN (
-- include: reap_batch
)
ON CONFLICT (job_id, attempt) DO UPDATE
SET ended_at = excluded.ended_at, outcome = excluded.outcome;
UPDATE job
SET status = CASE WHEN x.give_up THEN 'failure' ELSE 'queued' END,
    message = CASE WHEN x.give_up THEN 'lease expired ' || x.expiries || ' times'
                   ELSE job.message END,
    completed_at = CASE WHEN x.give_up THEN :now ELSE job.completed_at END,
    updated_at = :now
FROM (SELECT t.job_id,
             COUNT(*) AS expiries,
             :max_reclaims > 0 AND COUNT(*) >= :max_reclaims AS give_up
      FROM job_attempt AS t
      WHERE t.job_id IN (
-- include: reap_batch
      )
        AND t.outcome = 'expired'
      GROUP BY t.job_id) AS x
WHERE job.id = x.job_id AND job.status = 'inProgress';
SELECT COUNT(*) AS reaped,
       COALESCE(SUM(j.updated_at = :now AND j.status = 'queued'), 0) AS requeued,
       COALESCE(SUM(j.updated_at = :now AND j.status = 'failure'), 0) AS failed,
       json_group_array(j.job_agent_id)
           FILTER (WHERE j.updated_at = :now AND j.status = 'queued'
                   AND j.job_agent_id IS NOT NULL) AS requeued_agents
FROM job AS j
WHERE j.id IN (
-- include: reap_batch
);
DELETE FROM job_claim WHERE job_id IN (
-- include: reap_batch
);
-- Whether another batch waits: an expired claim is left after this one's are gone.
SELECT EXISTS (SELECT 1 FROM job_claim AS c, (SELECT :now AS now) AS n
-- include: reap_expired
) AS more

-- fragment: claim_marks
-- The claims of inProgress jobs (list_claims, urgent_claims and claim_counts read them),
-- each with its mark: its state, or `stale` for an active claim
-- silent (no heartbeat, else no claim) for longer than stale_after seconds (NULL: never), else
-- `quiet` for one whose command printed nothing (its last output, else the claim) for longer
-- than quiet_after seconds (NULL: never).
-- A new kind of claim is a new mark here; urgent_claims ranks it, claim_counts counts it.
SELECT *,
       CASE WHEN state = 'active'
                 AND silent_since < (julianday('now') - 2440587.5) * 86400.0 - :stale_after
            THEN 'stale'
            WHEN state = 'active'
                 AND quiet_since < (julianday('now') - 2440587.5) * 86400.0 - :quiet_after
            THEN 'quiet'
            ELSE state END AS mark
FROM (
    SELECT j.id AS job_id,
           j.rowid AS job_seq,
           COALESCE(j.job_agent_id, c.job_agent_id, t.job_agent_id) AS job_agent_id,
           c.claim_id,
           COALESCE(c.attempt, t.attempt) AS attempt,
           COALESCE(c.claimed_at, t.claimed_at, j.started_at) AS claimed_at,
           c.claim_expires_at,
           c.lease_seconds,
           CASE WHEN c.job_id IS NULL THEN 'unleased'
                WHEN c.claim_expires_at < (julianday('now') - 2440587.5) * 86400.0 THEN 'expired'
                ELSE 'active' END AS state,
           COALESCE(c.claim_expires_at - c.lease_seconds, c.claimed_at) AS silent_since,
           c.last_output_at,
           COALESCE(c.last_output_at, c.claimed_at) AS quiet_since
    FROM job AS j
    LEFT JOIN job_claim AS c ON c.job_id = j.id
    LEFT JOIN job_attempt AS t ON t.job_id = j.id AND t.ended_at IS NULL
    WHERE j.status = 'inProgress'
      AND j.workspace_id = :workspace_id
      AND (:agent_id IS NULL OR j.job_agent_id = :agent_id)
    UNION ALL
    -- Claims an operator revoked whose holder has not let go yet (as list_claims).
    SELECT r.job_id, j.rowid, r.job_agent_id, r.claim_id, r.attempt, r.claimed_at,
           r.claim_expires_at, r.lease_seconds, 'revoked', r.claimed_at, NULL, r.claimed_at
    FROM job_revoked_claim AS r
    JOIN job AS j ON j.id = r.job_id
    WHERE j.workspace_id = :workspace_id
      AND (:agent_id IS NULL OR j.job_agent_id = :agent_id)
) AS claims
WHERE :state = 'all' OR state = :state

-- name: list_claims
-- inProgress jobs with their claim row (active/expired) or without one (unleased); equal
-- millisecond claim times in job insertion order.
-- Built on claim_marks (its marks unused here: no stale_after or quiet_after is given).
SELECT *, COUNT(*) OVER () AS total FROM (
-- include: claim_marks
) AS marked
ORDER BY claimed_at, job_seq
LIMIT :limit OFFSET :offset

-- name: list_attempts
-- The ended attempts (and unleased ones, open) and the running leased attempt, read from its
-- claim row. One row with NULL attempt when the job exists but has no attempt row; none when
-- unknown.
SELECT t.attempt, t.claim_id, t.job_agent_id, t.claimed_at, t.ended_at, t.outcome
FROM job AS j
LEFT JOIN job_attempt AS t ON t.job_id = j.id
WHERE j.id = :job_id AND j.workspace_id = :workspace_id
  AND (:agent_scope IS NULL OR j.job_agent_id = :agent_scope)
UNION ALL
SELECT c.attempt, c.claim_id, c.job_agent_id, c.claimed_at, NULL, NULL
FROM job AS j
JOIN job_claim AS c ON c.job_id = j.id
WHERE j.id = :job_id AND j.workspace_id = :workspace_id
  AND (:agent_scope IS NULL OR j.job_agent_id = :agent_scope)
ORDER BY 1

-- name: claim_stats
SELECT
    (SELECT COUNT(*) FROM job_claim
     WHERE claim_expires_at >= (julianday('now') - 2440587.5) * 86400.0) AS active,
    (SELECT COUNT(*) FROM job_claim
     WHERE claim_expires_at < (julianday('now') - 2440587.5) * 86400.0) AS expired,
    (SELECT COUNT(*) FROM job AS j
     WHERE j.status = 'inProgress'
       AND NOT EXISTS (SELECT 1 FROM job_claim AS c WHERE c.job_id = j.id)) AS unleased,
    (SELECT COUNT(*) FROM job_revoked_claim) AS revoked,
    COALESCE((SELECT (julianday('now') - 2440587.5) * 86400.0 - MIN(claimed_at) FROM job_claim),
             0.0) AS oldest_age_seconds

-- name: log_append
-- Append a request's chunks to the log of the attempt that the claim :claim_id holds (the
-- fence: the chain stops, writing nothing, when it is neither the job's current claim nor its
-- revoked claim whose holder has not let go). The chain holds the database's write lock from
-- its first statement, so whatever ends the attempt or lets go of it comes wholly before or
-- after it. The attempt's row hands out seqs and offsets; the chunks' bytes come as one BLOB
-- (:data) and a JSON list of {i, stream, at, start, len, pos}: each chunk its slice of it
-- (substr on a BLOB counts bytes).
SELECT c.attempt, j.workspace_id AS log_workspace_id
FROM job_claim AS c
JOIN job AS j ON j.id = c.job_id
WHERE c.job_id = :job_id AND c.claim_id = :claim_id AND j.workspace_id = :workspace_id
  AND (:agent_scope IS NULL OR c.job_agent_id = :agent_scope)
UNION ALL
SELECT r.attempt, j.workspace_id AS log_workspace_id
FROM job_revoked_claim AS r
JOIN job AS j ON j.id = r.job_id
WHERE r.job_id = :job_id AND r.claim_id = :claim_id AND j.workspace_id = :workspace_id
  AND (:agent_scope IS NULL OR r.job_agent_id = :agent_scope);
INSERT INTO job_log_attempt (job_id, attempt, workspace_id, next_seq, appended_bytes,
                             stored_bytes, stored_rows, created_at, last_at)
VALUES (:job_id, :attempt, :log_workspace_id, 1 + :n, :size, :size, :n,
        (julianday('now') - 2440587.5) * 86400.0, (julianday('now') - 2440587.5) * 86400.0)
ON CONFLICT (job_id, attempt) DO UPDATE
SET next_seq = next_seq + :n,
    appended_bytes = appended_bytes + :size,
    stored_bytes = stored_bytes + :size,
    stored_rows = stored_rows + :n,
    last_at = excluded.last_at
RETURNING next_seq, appended_bytes, stored_bytes, cut_bytes, stored_rows;
INSERT INTO job_log (job_id, attempt, seq, workspace_id, byte_offset, stream, at, data)
SELECT :job_id, :attempt, :next_seq - :n - 1 + json_extract(x.value, '$.i'), :log_workspace_id,
       :appended_bytes - :size + json_extract(x.value, '$.pos'),
       json_extract(x.value, '$.stream'), json_extract(x.value, '$.at'),
       substr(:data, json_extract(x.value, '$.start'), json_extract(x.value, '$.len'))
FROM json_each(:chunks) AS x

-- name: log_trim
-- The cap (see the PostgreSQL block of this name): when the log costs more than :max_bytes
-- (each chunk its bytes plus :row_cost), cut the oldest chunks after the head down to
-- :low_water; the first chunk cut becomes the one truncation marker. The rows are counted
-- here (rows_now) and the count written back.
SELECT stored_bytes, marker_seq, cut_bytes,
       (SELECT count(*) FROM job_log WHERE job_id = :job_id AND attempt = :attempt) AS rows_now
FROM job_log_attempt
WHERE job_id = :job_id AND attempt = :attempt
  AND stored_bytes + stored_rows * :row_cost > :max_bytes;
SELECT min(v.seq) AS first_cut, max(v.seq) AS last_cut, COALESCE(sum(v.len), 0) AS cut_now,
       count(v.seq) AS cut_rows
FROM (SELECT seq, length(data) AS len, sum(length(data) + :row_cost) OVER (ORDER BY seq) AS upto
      FROM job_log
      WHERE job_id = :job_id AND attempt = :attempt
        AND byte_offset + (seq - 1) * :row_cost >= :head_bytes
        AND seq IS NOT :marker_seq) AS v
WHERE v.upto - v.len - :row_cost < :stored_bytes + :rows_now * :row_cost - :low_water;
DELETE FROM job_log
WHERE job_id = :job_id AND attempt = :attempt
  AND byte_offset + (seq - 1) * :row_cost >= :head_bytes
  AND seq <= :last_cut AND seq <> COALESCE(:marker_seq, :first_cut);
UPDATE job_log
SET stream = 'marker',
    data = CAST('[jobagentctl: ' || (:cut_bytes + :cut_now)
                || ' bytes of output cut here: the log is over its cap of ' || :max_bytes
                || ' bytes]' AS BLOB)
WHERE job_id = :job_id AND attempt = :attempt AND seq = COALESCE(:marker_seq, :first_cut);
UPDATE job_log_attempt
SET stored_bytes = stored_bytes - :cut_now,
    cut_bytes = cut_bytes + :cut_now,
    stored_rows = :rows_now - :cut_rows
                  + CASE WHEN :marker_seq IS NULL AND :first_cut IS NOT NULL THEN 1 ELSE 0 END,
    marker_seq = COALESCE(marker_seq, :first_cut)
WHERE job_id = :job_id AND attempt = :attempt
RETURNING stored_bytes, cut_bytes, stored_rows

-- name: log_state
-- A read's first question: the job in scope, its attempt (the latest when none is asked), how
-- that attempt ended (job_attempt), whether the holder of its revoked claim may still append
-- (holder_writing), and its log's state.
SELECT j.status AS job_status, j.attempts AS attempts, a.n AS attempt,
       t.ended_at, t.outcome, s.next_seq, s.expired_at,
       EXISTS (SELECT 1 FROM job_revoked_claim AS r
               WHERE r.job_id = j.id AND r.attempt = a.n) AS holder_writing
FROM job AS j
JOIN (SELECT COALESCE(:attempt, (SELECT attempts FROM job WHERE id = :job_id)) AS n) AS a
LEFT JOIN job_attempt AS t ON t.job_id = j.id AND t.attempt = a.n
LEFT JOIN job_log_attempt AS s ON s.job_id = j.id AND s.attempt = a.n
WHERE j.id = :job_id AND j.workspace_id = :workspace_id
  AND (:agent_scope IS NULL OR j.job_agent_id = :agent_scope)

-- name: log_chunks
SELECT seq, byte_offset, stream, at, data
FROM job_log
WHERE job_id = :job_id AND attempt = :attempt AND seq > :after
ORDER BY seq
LIMIT :limit

-- fragment: expiring_logs
-- The attempts whose logs retention deletes in this batch (log_expire).
    SELECT s.job_id, s.attempt FROM job_log_attempt AS s
    JOIN job_attempt AS t ON t.job_id = s.job_id AND t.attempt = s.attempt
    WHERE s.expired_at IS NULL
      AND s.created_at < (julianday('now') - 2440587.5) * 86400.0 - :retention_seconds
      AND t.ended_at < (julianday('now') - 2440587.5) * 86400.0 - :retention_seconds
    ORDER BY s.created_at, s.job_id, s.attempt
    LIMIT :batch_size

-- name: log_expire
-- Retention, one batch (see the PostgreSQL block of this name), in one transaction: each
-- statement selects the same batch (same order, nothing else writes meanwhile).
SELECT count(*) AS expired_logs FROM (
-- include: expiring_logs
);
DELETE FROM job_log
WHERE (job_id, attempt) IN (
-- include: expiring_logs
);
UPDATE job_log_attempt
SET expired_at = (julianday('now') - 2440587.5) * 86400.0, stored_bytes = 0, stored_rows = 0
WHERE (job_id, attempt) IN (
-- include: expiring_logs
)
-- name: api_key_revoked
-- Whether the key of that id is revoked (no row: there is no such key).
SELECT revoked_at IS NOT NULL AS revoked FROM api_key WHERE id = :id

-- name: urgent_claims
-- The most urgent claims first: expired (longest overdue first), then unleased or stale,
-- then the rest by nearest expiry.
SELECT * FROM (
-- include: claim_marks
) AS marked
ORDER BY CASE mark WHEN 'expired' THEN 0 WHEN 'active' THEN 2 ELSE 1 END,
         claim_expires_at IS NULL, claim_expires_at, claimed_at, job_seq
LIMIT :limit

-- name: claim_counts
-- How many claims there are of each mark (the marks of urgent_claims).
SELECT mark, COUNT(*) AS n FROM (
-- include: claim_marks
) AS marked
GROUP BY mark
-- name: release_revoked
-- The holder of a revoked claim reports with its claim id (refused, or a repeat), so its
-- command has ended: the job no longer waits for it. Answers the job's status and agent, whose
-- long-polls the store wakes when the job is queued.
DELETE FROM job_revoked_claim
WHERE job_id = :job_id AND claim_id = :claim_id
  AND EXISTS (SELECT 1 FROM job AS j
              WHERE j.id = job_revoked_claim.job_id AND j.workspace_id = :workspace_id
                AND (:agent_scope IS NULL OR j.job_agent_id = :agent_scope))
RETURNING job_id;
SELECT status, job_agent_id FROM job WHERE id = :job_id

-- name: reap_revoked
-- Revoked claims whose lease ran out (their holder no longer heartbeats, so no outage grace):
-- the jobs stop waiting for them. The agents of those jobs now queued, to wake.
SELECT n.now,
       COUNT(r.job_id) AS released,
       json_group_array(j.job_agent_id)
           FILTER (WHERE j.status = 'queued' AND j.job_agent_id IS NOT NULL) AS queued_agents
FROM (SELECT (julianday('now') - 2440587.5) * 86400.0 AS now) AS n
LEFT JOIN job_revoked_claim AS r ON r.claim_expires_at < n.now
LEFT JOIN job AS j ON j.id = r.job_id;
DELETE FROM job_revoked_claim WHERE claim_expires_at < :now

-- name: get_agent_presence
SELECT a.*,
-- include: agent_presence
WHERE a.id = :id AND a.workspace_id = :workspace_id

-- name: touch_agent
-- The agent was seen now (a request made for it); the server throttles these writes. Only an
-- agent of the request's workspace: another workspace's key naming it writes nothing.
INSERT INTO job_agent_presence (job_agent_id, last_seen_at)
SELECT a.id, (julianday('now') - 2440587.5) * 86400.0 FROM job_agent AS a
WHERE a.id = :agent_id AND a.workspace_id = :workspace_id
ON CONFLICT (job_agent_id) DO UPDATE SET last_seen_at = excluded.last_seen_at
RETURNING job_agent_id

-- name: agent_state_counts
-- For /metrics: agents by state, every workspace.
SELECT state, COUNT(*) AS agents
FROM (
    SELECT a.id,
-- include: agent_presence
) AS agents
GROUP BY state
