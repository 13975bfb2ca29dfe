-- The reduced-write variant of the project's SQL (issue 14 §2), proposed to the store engineer.
-- claim: one statement, as today, but it writes job + job_claim only: the attempt number is
--   1 + the attempts already ended (their rows), and no attempt row is opened.
-- complete: ONE fenced statement: delete the claim (fence: claim id and workspace), write the
--   attempt row once, from the claim row, as it ends, and set the job's terminal status.
--   Zero rows back = refused; only then does the server read the diagnosis (job_claim_state).
-- Returns what the wire needs: the claimed job (j.*) and, on complete, {id, status}.
-- pgbench variables: :b_agent, :b_ws (set with -D).
WITH picked AS (
    SELECT j.id
    FROM job AS j
    WHERE j.job_agent_id = :b_agent AND j.status = 'queued'
      AND EXISTS (SELECT 1 FROM job_agent AS a
                  WHERE a.id = :b_agent AND a.workspace_id = :b_ws)
    ORDER BY j.created_at, j.id
    LIMIT 1
    FOR UPDATE SKIP LOCKED
),
claimed AS (
    UPDATE job AS j
    SET status = 'inProgress', started_at = now(), updated_at = now()
    FROM picked AS p
    WHERE j.id = p.id
    RETURNING j.*
),
lease AS (
    INSERT INTO job_claim (job_id, job_agent_id, claimed_at, claim_expires_at, claim_id,
                           lease_seconds, attempt)
    SELECT c.id, c.job_agent_id, now(), now() + make_interval(secs => 60), gen_random_uuid(), 60,
           COALESCE((SELECT max(t.attempt) FROM job_attempt AS t WHERE t.job_id = c.id), 0) + 1
    FROM claimed AS c
    RETURNING job_id, attempt, claim_id, claimed_at, claim_expires_at, lease_seconds
)
SELECT c.id AS bj_id, l.claim_id AS bj_claim, c.status, c.job_agent_config, c.dispatch_context,
       c.metadata, c.created_at, c.started_at, l.attempt, l.claimed_at, l.claim_expires_at,
       l.lease_seconds
FROM claimed AS c JOIN lease AS l ON l.job_id = c.id \gset
WITH released AS (
    DELETE FROM job_claim AS c
    WHERE c.job_id = :bj_id AND c.claim_id = :bj_claim
      AND EXISTS (SELECT 1 FROM job_agent AS a
                  WHERE a.id = c.job_agent_id AND a.workspace_id = :b_ws)
    RETURNING c.job_id, c.attempt, c.claim_id, c.job_agent_id, c.claimed_at
),
ended AS (
    INSERT INTO job_attempt (job_id, attempt, claim_id, job_agent_id, claimed_at, ended_at,
                             outcome)
    SELECT r.job_id, r.attempt, r.claim_id, r.job_agent_id, r.claimed_at, now(), 'completed'
    FROM released AS r
)
UPDATE job AS j
SET status = 'successful', updated_at = now(), completed_at = now(),
    message = COALESCE(NULL::text, j.message),
    external_id = COALESCE(NULL::text, j.external_id),
    metadata = j.metadata || COALESCE(NULL::jsonb, '{}'::jsonb)
FROM released AS r
WHERE j.id = r.job_id
RETURNING j.id, j.status;
