-- The seed's minimal design (issue 14): claim = one CTE with SKIP LOCKED that flips the job and
-- inserts the lease; complete = one fenced statement, DELETE job_claim … RETURNING → UPDATE job.
-- No attempt row, no workspace check. Same schema and same seeded queue as the project's SQL.
-- pgbench variables: :b_agent (the agent), :b_ws (its workspace), set with -D.
WITH picked AS (
    SELECT j.id FROM job AS j
    WHERE j.job_agent_id = :b_agent AND j.status = 'queued'
    ORDER BY j.created_at, j.id
    LIMIT 1
    FOR UPDATE SKIP LOCKED
),
claimed AS (
    UPDATE job AS j SET status = 'inProgress', started_at = now(), updated_at = now()
    FROM picked AS p WHERE j.id = p.id
    RETURNING j.*
)
INSERT INTO job_claim (job_id, job_agent_id, claimed_at, claim_expires_at, claim_id,
                       lease_seconds, attempt)
SELECT c.id, c.job_agent_id, now(), now() + interval '60 seconds', gen_random_uuid(), 60, 1
FROM claimed AS c
RETURNING job_id AS bj_id, claim_id AS bj_claim \gset
WITH released AS (
    DELETE FROM job_claim AS c
    WHERE c.job_id = :bj_id AND c.claim_id = :bj_claim
    RETURNING c.job_id
)
UPDATE job AS j SET status = 'successful', completed_at = now(), updated_at = now()
FROM released AS r WHERE j.id = r.job_id;
