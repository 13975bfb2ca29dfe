-- Gateway mode (server/upstream/, docs/gateway.md): ctrlplane holds every job's status; these
-- keep the gateway's mirror of the jobs it claimed and its outbox (upstream_op).

-- name: gateway_register
INSERT INTO gateway_upstream (workspace_id, upstream_url, created_at)
VALUES (:workspace_id, :upstream_url, (julianday('now') - 2440587.5) * 86400.0)
ON CONFLICT (workspace_id) DO UPDATE SET upstream_url = excluded.upstream_url
RETURNING *

-- name: gateway_workspaces
SELECT workspace_id, upstream_url FROM gateway_upstream ORDER BY created_at

-- name: gateway_mirror_job
-- The job as ctrlplane listed it (queued), unless the gateway has it in progress: a claim of
-- ours, or a report or requeue not delivered yet, is newer than ctrlplane's listing. A job
-- that ended here is made queued again only when ctrlplane confirmed it (:confirmed, read
-- by id): a listing taken before the job ended still shows it queued.
INSERT INTO job (id, workspace_id, job_agent_id, status, job_agent_config, dispatch_context,
                 metadata, created_at, updated_at)
VALUES (:id, :workspace_id, :agent_id, 'queued', :job_agent_config, :dispatch_context,
        :metadata, :created_at, (julianday('now') - 2440587.5) * 86400.0)
ON CONFLICT (id) DO UPDATE
SET status = 'queued',
    job_agent_id = excluded.job_agent_id,
    job_agent_config = excluded.job_agent_config,
    dispatch_context = excluded.dispatch_context,
    completed_at = NULL,
    updated_at = excluded.updated_at
WHERE job.status <> 'inProgress' AND job.workspace_id = excluded.workspace_id
  AND NOT EXISTS (SELECT 1 FROM upstream_op AS o WHERE o.job_id = job.id AND o.done_at IS NULL)
  AND (job.completed_at IS NULL OR :confirmed)
RETURNING id

-- name: gateway_undo_claim
-- ctrlplane refused the claim (another claimer won): the local claim never reached an agent,
-- so it leaves no attempt behind.
DELETE FROM job_claim WHERE job_id = :job_id AND claim_id = :claim_id
RETURNING job_id AS undone;
UPDATE job
SET status = 'queued', attempts = attempts - 1, started_at = NULL,
    updated_at = (julianday('now') - 2440587.5) * 86400.0
WHERE id = :job_id AND status = 'inProgress'

-- name: gateway_accept_report
-- The holder's report, fenced: mark its claim delivering (never reaped) and write the report to
-- the outbox, in one transaction. Nothing when the claim is not the job's current one.
UPDATE job_claim
SET delivering = 1
WHERE job_id = :job_id AND claim_id = :claim_id
  AND (:agent_scope IS NULL OR job_agent_id = :agent_scope)
  AND EXISTS (SELECT 1 FROM job AS j WHERE j.id = job_claim.job_id
              AND j.workspace_id = :workspace_id)
RETURNING job_id AS held_job, attempt AS held_attempt;
INSERT INTO upstream_op (id, workspace_id, job_id, kind, claim_id, payload, created_at,
                         next_try_at)
VALUES (:op_id, :workspace_id, :job_id, 'report', :claim_id, :payload,
        (julianday('now') - 2440587.5) * 86400.0,
        (julianday('now') - 2440587.5) * 86400.0 + :hold)
ON CONFLICT (job_id, claim_id, kind) DO NOTHING;
SELECT id AS op_id, payload AS op_payload, done_at AS op_done
FROM upstream_op
WHERE job_id = :job_id AND claim_id = :claim_id AND kind = 'report'

-- name: gateway_report_op
SELECT id AS op_id, payload AS op_payload, done_at AS op_done
FROM upstream_op
WHERE job_id = :job_id AND claim_id = :claim_id AND kind = 'report' AND workspace_id = :workspace_id

-- name: gateway_take_ops
-- Due outbox rows, each held for :hold seconds by this process (another takes it after that).
UPDATE upstream_op
SET next_try_at = (julianday('now') - 2440587.5) * 86400.0 + :hold, tries = tries + 1
WHERE id IN (SELECT id FROM upstream_op
             WHERE done_at IS NULL
               AND next_try_at <= (julianday('now') - 2440587.5) * 86400.0
             ORDER BY created_at LIMIT :limit)
RETURNING *

-- name: gateway_op_done
UPDATE upstream_op
SET done_at = (julianday('now') - 2440587.5) * 86400.0, last_error = :error
WHERE id = :id AND done_at IS NULL
RETURNING id

-- name: gateway_op_retry
UPDATE upstream_op
SET next_try_at = (julianday('now') - 2440587.5) * 86400.0 + :delay, last_error = :error
WHERE id = :id AND done_at IS NULL
RETURNING id

-- name: gateway_expired_claims
SELECT c.job_id, c.claim_id, j.workspace_id
FROM job_claim AS c JOIN job AS j ON j.id = c.job_id
WHERE c.claim_expires_at < (julianday('now') - 2440587.5) * 86400.0 AND NOT c.delivering
ORDER BY c.claim_expires_at
LIMIT :limit

-- name: gateway_expire_claim
-- The gateway's reap of one expired claim (not delivering, not revived meanwhile): the attempt
-- ends expired, the job waits here as queued, and the requeue goes to the outbox, all in one
-- transaction; ctrlplane lists the job as queued again only once the outbox delivered it.
DELETE FROM job_claim
WHERE job_id = :job_id AND claim_id = :claim_id AND NOT delivering
  AND claim_expires_at < (julianday('now') - 2440587.5) * 86400.0
RETURNING job_id AS reaped_job, job_agent_id AS reaped_agent, claimed_at AS reaped_claimed_at,
          attempt AS reaped_attempt, (julianday('now') - 2440587.5) * 86400.0 AS reaped_at;
INSERT INTO job_attempt (job_id, attempt, claim_id, job_agent_id, claimed_at, ended_at, outcome)
VALUES (:job_id, :reaped_attempt, :claim_id, :reaped_agent, :reaped_claimed_at, :reaped_at,
        'expired')
ON CONFLICT (job_id, attempt) DO UPDATE
SET ended_at = excluded.ended_at, outcome = excluded.outcome;
UPDATE job
SET status = 'queued', updated_at = :reaped_at
WHERE id = :job_id AND status = 'inProgress';
INSERT INTO upstream_op (id, workspace_id, job_id, kind, claim_id, payload, created_at,
                         next_try_at)
VALUES (:op_id, :workspace_id, :job_id, 'requeue', :claim_id, '{}', :reaped_at, :reaped_at)
ON CONFLICT (job_id, claim_id, kind) DO NOTHING

-- name: gateway_live_claims
-- Claims of the gateway's whose job ctrlplane may have changed meanwhile (the sync reads them):
-- not delivering, and older than :min_age seconds (a claim younger may not be in ctrlplane yet).
SELECT c.job_id, c.job_agent_id, c.claim_id, j.workspace_id
FROM job_claim AS c JOIN job AS j ON j.id = c.job_id
WHERE NOT c.delivering
  AND c.claimed_at < (julianday('now') - 2440587.5) * 86400.0 - :min_age

-- name: gateway_pending_ops
SELECT o.job_id, o.kind, o.tries, o.last_error
FROM upstream_op AS o
WHERE o.done_at IS NULL AND o.workspace_id = :workspace_id

-- name: gateway_revoked_held
SELECT 1 AS held FROM job_revoked_claim
WHERE job_id = :job_id AND claim_expires_at > (julianday('now') - 2440587.5) * 86400.0

-- name: gateway_claim_of
SELECT claim_id FROM job_claim WHERE job_id = :job_id

-- name: gateway_add_requeue
INSERT INTO upstream_op (id, workspace_id, job_id, kind, claim_id, payload, created_at,
                         next_try_at)
VALUES (:op_id, :workspace_id, :job_id, 'requeue', :claim_id, '{}',
        (julianday('now') - 2440587.5) * 86400.0, (julianday('now') - 2440587.5) * 86400.0)
ON CONFLICT (job_id, claim_id, kind) DO NOTHING

-- name: gateway_pending_count
SELECT COUNT(*) AS n FROM upstream_op WHERE done_at IS NULL
