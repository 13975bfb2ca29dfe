-- The SQLite store's statements: claim, heartbeat, status change (fenced by the claim), reap.
-- The dialect's conventions: schema.sql's header.

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
-- What both claims do after the UPDATE that flipped the job (its row is in the parameters,
-- with its granted lease, :granted_lease, NULL = unleased): the claim's attempt and time, the
-- lease when there is one (the job and the claim agree on the time to the millisecond), and
-- for an unleased (V1) claim, which has no claim row, its open attempt row (a leased attempt's
-- row is written once, when it ends, from the claim row).
SELECT :attempts AS attempt, :started_at AS claimed_at,
       CASE WHEN :granted_lease IS NULL THEN NULL ELSE :new_claim_id END AS claim_id;
INSERT INTO job_claim (job_id, job_agent_id, claimed_at, claim_expires_at, claim_id,
                       lease_seconds, attempt)
SELECT :id, :job_agent_id, :claimed_at, :claimed_at + :granted_lease, :claim_id,
       :granted_lease, :attempt
WHERE :granted_lease IS NOT NULL
RETURNING claim_expires_at, lease_seconds;
INSERT INTO job_attempt (job_id, attempt, claim_id, job_agent_id, claimed_at)
SELECT :id, :attempt, NULL, :job_agent_id, :claimed_at
WHERE :granted_lease IS NULL

-- name: claim_job
-- Flip the job (only if still queued) and count the attempt on it, then claim_tail. The lease
-- is :lease_seconds; when that is NULL and :agent_lease, the agent's config.leaseSeconds read
-- here (service.resolve_lease's rule: a positive number, truncated, clamped into
-- [:lease_min, :lease_max]; anything else: unleased), so a V1 claim by id costs no lookup of
-- the agent first.
UPDATE job
SET status = 'inProgress',
    started_at = (julianday('now') - 2440587.5) * 86400.0,
    updated_at = (julianday('now') - 2440587.5) * 86400.0,
    attempts = attempts + 1
WHERE id = :job_id AND job_agent_id = :agent_id AND status = 'queued'
  AND EXISTS (SELECT 1 FROM job_agent AS a WHERE a.id = :agent_id AND a.workspace_id = :workspace_id)
  AND NOT EXISTS (SELECT 1 FROM job_revoked_claim AS r WHERE r.job_id = :job_id)
RETURNING *, COALESCE(
    :lease_seconds,
    (SELECT CASE WHEN :agent_lease
                      AND json_type(a.config, '$.leaseSeconds') IN ('integer', 'real')
                 THEN CASE WHEN json_extract(a.config, '$.leaseSeconds') > 0
                           THEN MAX(:lease_min,
                                    MIN(:lease_max,
                                        CAST(json_extract(a.config, '$.leaseSeconds') AS INTEGER)))
                      END
            END
     FROM job_agent AS a WHERE a.id = :agent_id)) AS granted_lease;
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
RETURNING *, :lease_seconds AS granted_lease;
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

-- name: finish_unclaimed
-- The common status update without a claim id (a V1 agent reporting on its unleased claim, an
-- operator's change to a job that no claim row holds) without reading first: the job in
-- scope, without a claim row, and not a repeat of its terminal status (the locked path
-- answers a repeat) takes the status; its open (unleased) attempt is ended when it leaves
-- inProgress (at the updated_at just written, as apply_status). No row back = a claim row, a
-- repeat or a job out of scope: the locked path decides. One write transaction: nothing can
-- change between the checks and the writes. The store takes this path only without a
-- metadata patch (SQLite merges metadata in Python).
UPDATE job
SET status = :status,
    updated_at = (julianday('now') - 2440587.5) * 86400.0,
    message = COALESCE(:message, message),
    external_id = COALESCE(:external_id, external_id),
    started_at = CASE WHEN :status = 'inProgress' AND status <> 'inProgress'
                      THEN (julianday('now') - 2440587.5) * 86400.0 ELSE started_at END,
    completed_at = CASE WHEN :terminal THEN (julianday('now') - 2440587.5) * 86400.0 END
WHERE id = :job_id AND workspace_id = :workspace_id
  AND (:agent_scope IS NULL OR job_agent_id = :agent_scope)
  AND NOT (:terminal AND status = :status)
  AND NOT EXISTS (SELECT 1 FROM job_claim AS c WHERE c.job_id = :job_id)
RETURNING id, status, job_agent_id, updated_at;
UPDATE job_attempt
SET ended_at = :updated_at, outcome = :outcome
WHERE job_id = :job_id AND ended_at IS NULL AND :status <> 'inProgress'

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
