-- Gateway mode (server/upstream/, docs/gateway.md): ctrlplane holds every job's status; these
-- keep the gateway's mirror of the jobs it claimed and its outbox (upstream_op).

-- name: gateway_register
INSERT INTO gateway_upstream (workspace_id, upstream_url, created_at)
VALUES (%(workspace_id)s::uuid, %(upstream_url)s::text, now())
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
VALUES (%(id)s::uuid, %(workspace_id)s::uuid, %(agent_id)s::uuid, 'queued',
        %(job_agent_config)s::jsonb, %(dispatch_context)s::jsonb, %(metadata)s::jsonb,
        to_timestamp(%(created_at)s::double precision), now())
ON CONFLICT (id) DO UPDATE
SET status = 'queued',
    job_agent_id = excluded.job_agent_id,
    job_agent_config = excluded.job_agent_config,
    dispatch_context = excluded.dispatch_context,
    completed_at = NULL,
    updated_at = excluded.updated_at
WHERE job.status <> 'inProgress' AND job.workspace_id = excluded.workspace_id
  AND NOT EXISTS (SELECT 1 FROM upstream_op AS o WHERE o.job_id = job.id AND o.done_at IS NULL)
  AND (job.completed_at IS NULL OR %(confirmed)s::boolean)
RETURNING id

-- name: gateway_undo_claim
-- ctrlplane refused the claim (another claimer won): the local claim never reached an agent,
-- so it leaves no attempt behind.
WITH gone AS (
    DELETE FROM job_claim
    WHERE job_id = %(job_id)s::uuid AND claim_id = %(claim_id)s::uuid
    RETURNING job_id
), reset AS (
    UPDATE job
    SET status = 'queued', attempts = job.attempts - 1, started_at = NULL, updated_at = now()
    FROM gone
    WHERE job.id = gone.job_id AND job.status = 'inProgress'
    RETURNING job.id
)
SELECT gone.job_id AS undone FROM gone

-- name: gateway_accept_report
-- The holder's report, fenced: mark its claim delivering (never reaped) and write the report to
-- the outbox, in one statement. Nothing when the claim is not the job's current one.
WITH held AS (
    UPDATE job_claim AS c
    SET delivering = true
    WHERE c.job_id = %(job_id)s::uuid AND c.claim_id = %(claim_id)s::uuid
      AND (%(agent_scope)s::uuid IS NULL OR c.job_agent_id = %(agent_scope)s::uuid)
      AND EXISTS (SELECT 1 FROM job AS j WHERE j.id = c.job_id
                  AND j.workspace_id = %(workspace_id)s::uuid)
    RETURNING c.job_id, c.attempt
), added AS (
    INSERT INTO upstream_op (id, workspace_id, job_id, kind, claim_id, payload, created_at,
                             next_try_at)
    SELECT %(op_id)s::uuid, %(workspace_id)s::uuid, held.job_id, 'report',
           %(claim_id)s::uuid, %(payload)s::jsonb, now(),
           now() + make_interval(secs => %(hold)s::double precision)
    FROM held
    ON CONFLICT (job_id, claim_id, kind) DO NOTHING
    RETURNING id, payload, done_at
)
SELECT held.job_id AS held_job, held.attempt AS held_attempt,
       COALESCE(added.id, o.id) AS op_id, COALESCE(added.payload, o.payload) AS op_payload,
       COALESCE(added.done_at, o.done_at) AS op_done
FROM held
LEFT JOIN added ON true
LEFT JOIN upstream_op AS o
       ON o.job_id = held.job_id AND o.claim_id = %(claim_id)s::uuid AND o.kind = 'report'

-- name: gateway_report_op
SELECT id AS op_id, payload AS op_payload, done_at AS op_done
FROM upstream_op
WHERE job_id = %(job_id)s::uuid AND claim_id = %(claim_id)s::uuid AND kind = 'report'
  AND workspace_id = %(workspace_id)s::uuid

-- name: gateway_take_ops
-- Due outbox rows, each held for :hold seconds by this process (another takes it after that;
-- replicas skip the rows another is taking).
UPDATE upstream_op
SET next_try_at = now() + make_interval(secs => %(hold)s::double precision),
    tries = tries + 1
WHERE id IN (SELECT id FROM upstream_op
             WHERE done_at IS NULL AND next_try_at <= now()
             ORDER BY created_at LIMIT %(limit)s::integer
             FOR UPDATE SKIP LOCKED)
RETURNING *

-- name: gateway_op_done
UPDATE upstream_op
SET done_at = now(), last_error = %(error)s::text
WHERE id = %(id)s::uuid AND done_at IS NULL
RETURNING id

-- name: gateway_op_retry
UPDATE upstream_op
SET next_try_at = now() + make_interval(secs => %(delay)s::double precision),
    last_error = %(error)s::text
WHERE id = %(id)s::uuid AND done_at IS NULL
RETURNING id

-- name: gateway_expired_claims
SELECT c.job_id, c.claim_id, j.workspace_id
FROM job_claim AS c JOIN job AS j ON j.id = c.job_id
WHERE c.claim_expires_at < now() AND NOT c.delivering
ORDER BY c.claim_expires_at
LIMIT %(limit)s::integer

-- name: gateway_expire_claim
-- The gateway's reap of one expired claim (not delivering, not revived meanwhile): the attempt
-- ends expired, the job waits here as queued, and the requeue goes to the outbox, in one
-- statement; ctrlplane lists the job as queued again only once the outbox delivered it.
WITH gone AS (
    DELETE FROM job_claim AS c
    WHERE c.job_id = %(job_id)s::uuid AND c.claim_id = %(claim_id)s::uuid
      AND NOT c.delivering AND c.claim_expires_at < now()
    RETURNING c.*
), ended AS (
    INSERT INTO job_attempt (job_id, attempt, claim_id, job_agent_id, claimed_at, ended_at,
                             outcome)
    SELECT job_id, attempt, claim_id, job_agent_id, claimed_at, now(), 'expired' FROM gone
    ON CONFLICT (job_id, attempt) DO UPDATE
    SET ended_at = excluded.ended_at, outcome = excluded.outcome
    RETURNING job_id
), queued AS (
    UPDATE job SET status = 'queued', updated_at = now()
    FROM gone
    WHERE job.id = gone.job_id AND job.status = 'inProgress'
    RETURNING job.id
), outbox AS (
    INSERT INTO upstream_op (id, workspace_id, job_id, kind, claim_id, payload, created_at,
                             next_try_at)
    SELECT %(op_id)s::uuid, %(workspace_id)s::uuid, gone.job_id, 'requeue', gone.claim_id,
           '{}'::jsonb, now(), now()
    FROM gone
    ON CONFLICT (job_id, claim_id, kind) DO NOTHING
    RETURNING id
)
SELECT gone.job_id AS reaped_job FROM gone

-- name: gateway_live_claims
-- Claims of the gateway's whose job ctrlplane may have changed meanwhile (the sync reads them):
-- not delivering, and older than :min_age seconds (a claim younger may not be in ctrlplane yet).
SELECT c.job_id, c.job_agent_id, c.claim_id, j.workspace_id
FROM job_claim AS c JOIN job AS j ON j.id = c.job_id
WHERE NOT c.delivering
  AND c.claimed_at < now() - make_interval(secs => %(min_age)s::double precision)

-- name: gateway_pending_ops
SELECT o.job_id, o.kind, o.tries, o.last_error
FROM upstream_op AS o
WHERE o.done_at IS NULL AND o.workspace_id = %(workspace_id)s::uuid

-- name: gateway_revoked_held
SELECT 1 AS held FROM job_revoked_claim
WHERE job_id = %(job_id)s::uuid AND claim_expires_at > now()

-- name: gateway_claim_of
SELECT claim_id FROM job_claim WHERE job_id = %(job_id)s::uuid

-- name: gateway_add_requeue
INSERT INTO upstream_op (id, workspace_id, job_id, kind, claim_id, payload, created_at,
                         next_try_at)
VALUES (%(op_id)s::uuid, %(workspace_id)s::uuid, %(job_id)s::uuid, 'requeue',
        %(claim_id)s::uuid, '{}'::jsonb, now(), now())
ON CONFLICT (job_id, claim_id, kind) DO NOTHING

-- name: gateway_pending_count
SELECT COUNT(*) AS n FROM upstream_op WHERE done_at IS NULL
