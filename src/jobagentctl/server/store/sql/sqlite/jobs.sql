-- The SQLite store's statements: jobs created, read and listed; their attempts.
-- The dialect's conventions: schema.sql's header.

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
