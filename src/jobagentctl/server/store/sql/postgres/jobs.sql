-- The PostgreSQL store's statements: jobs created, read and listed; their attempts.
-- The dialect's conventions: schema.sql's header.

-- name: create_job
-- Inserts and wakes the agent's long-polls on every replica (delivered at commit).
WITH created AS (
    INSERT INTO job (id, workspace_id, job_agent_id, status, job_agent_config,
                     dispatch_context, metadata, created_at, updated_at)
    SELECT %(id)s, a.workspace_id, a.id, 'queued', COALESCE(%(job_agent_config)s::jsonb, a.config),
           %(dispatch_context)s::jsonb, %(metadata)s::jsonb, now(), now()
    FROM job_agent AS a
    WHERE a.id = %(agent_id)s AND a.workspace_id = %(workspace_id)s
    RETURNING *
),
woken AS (
    SELECT pg_notify('jobagentctl_job_queued', c.job_agent_id::text) FROM created AS c
)
SELECT c.*, (SELECT count(*) FROM woken) AS woken FROM created AS c

-- name: get_job
SELECT j.*,
       EXISTS (SELECT 1 FROM job_claim AS c WHERE c.job_id = j.id)
       OR EXISTS (SELECT 1 FROM job_revoked_claim AS r WHERE r.job_id = j.id) AS claim_held
FROM job AS j
WHERE j.id = %(job_id)s AND j.workspace_id = %(workspace_id)s
  AND (%(agent_scope)s::uuid IS NULL OR j.job_agent_id = %(agent_scope)s::uuid)

-- fragment: jobs_listed
-- The jobs a listing matches (job as j): the workspace's, of an agent and statuses if given.
    j.workspace_id = %(workspace_id)s
    AND (%(agent_id)s::uuid IS NULL OR j.job_agent_id = %(agent_id)s::uuid)
    AND (%(statuses)s::text[] IS NULL OR j.status = ANY (%(statuses)s::text[]))

-- name: list_jobs
-- A keyset cursor (after_at, after_key: the last row of the previous page) starts the page
-- after that row; total counts every matching job, before and after it (counted once, apart
-- from the page).
SELECT j.*, j.id AS list_key,
       (SELECT count(*) FROM job AS j WHERE
-- include: jobs_listed
       ) AS total
FROM job AS j
WHERE
-- include: jobs_listed
  AND (%(after_at)s::timestamptz IS NULL
       OR (j.created_at, j.id) < (%(after_at)s::timestamptz, %(after_key)s::uuid))
ORDER BY j.created_at DESC, j.id DESC
LIMIT %(limit)s OFFSET %(offset)s

-- name: list_attempts
-- The ended attempts (and unleased ones, open) and the running leased attempt, read from its
-- claim row. One row with NULL attempt when the job exists but has no attempt row; none when
-- unknown.
SELECT t.attempt, t.claim_id, t.job_agent_id, t.claimed_at, t.ended_at, t.outcome
FROM job AS j
LEFT JOIN job_attempt AS t ON t.job_id = j.id
WHERE j.id = %(job_id)s AND j.workspace_id = %(workspace_id)s
  AND (%(agent_scope)s::uuid IS NULL OR j.job_agent_id = %(agent_scope)s::uuid)
UNION ALL
SELECT c.attempt, c.claim_id, c.job_agent_id, c.claimed_at, NULL::timestamptz, NULL::text
FROM job AS j
JOIN job_claim AS c ON c.job_id = j.id
WHERE j.id = %(job_id)s AND j.workspace_id = %(workspace_id)s
  AND (%(agent_scope)s::uuid IS NULL OR j.job_agent_id = %(agent_scope)s::uuid)
ORDER BY attempt
