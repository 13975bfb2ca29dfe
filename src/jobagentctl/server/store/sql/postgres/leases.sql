-- The PostgreSQL store's statements: claim, heartbeat, status change (fenced by the claim), reap.
-- The dialect's conventions: schema.sql's header.

-- name: job_claim_state
-- The failure paths: does the job exist in scope, what is its status, who holds the claim.
SELECT j.status, c.claim_id, c.attempt,
       EXISTS (SELECT 1 FROM job_revoked_claim AS r WHERE r.job_id = j.id) AS revoked_held,
       (SELECT r.claim_id FROM job_revoked_claim AS r WHERE r.job_id = j.id) AS revoked_claim_id
FROM job AS j
LEFT JOIN job_claim AS c ON c.job_id = j.id
WHERE j.id = %(job_id)s AND j.workspace_id = %(workspace_id)s
  AND (%(agent_scope)s::uuid IS NULL OR j.job_agent_id = %(agent_scope)s::uuid)

-- name: queued_exists
-- A queued job whose revoked claim is still held is not claimable yet: it does not count.
SELECT 1 AS found FROM job
WHERE job_agent_id = %(agent_id)s AND status = 'queued'
  AND NOT EXISTS (SELECT 1 FROM job_revoked_claim AS r WHERE r.job_id = job.id)
LIMIT 1

-- name: queued_counts
-- The long-poll poller's one question for every agent with waiters (while LISTEN is down, and
-- once it is back): how many jobs each has queued, counting at most %(cap)s.
SELECT a.id AS job_agent_id,
       (SELECT count(*) FROM (SELECT 1 FROM job
                              WHERE job_agent_id = a.id AND status = 'queued'
                                AND NOT EXISTS (SELECT 1 FROM job_revoked_claim AS r
                                                WHERE r.job_id = job.id)
                              LIMIT %(cap)s) AS q) AS jobs
FROM unnest(%(agents)s::uuid[]) AS a(id)

-- fragment: claim_tail
-- What both claims do after flipping the job (CTE `claimed`, the job rows as now, each with
-- its granted lease, `granted_lease`: NULL = unleased): record the lease, one claim row per
-- job (its own random claim id); an unleased (V1) claim has no claim row, so it opens its
-- attempt row here (a leased attempt's row is written once, when it ends, from the claim row).
-- Answers the claimed jobs, oldest first.
lease AS (
    INSERT INTO job_claim (job_id, job_agent_id, claimed_at, claim_expires_at, claim_id,
                           lease_seconds, attempt)
    SELECT c.id, c.job_agent_id, now(), now() + make_interval(secs => c.granted_lease),
           gen_random_uuid(), c.granted_lease, c.attempts
    FROM claimed AS c
    WHERE c.granted_lease IS NOT NULL
    -- A plain insert: no claim row exists for a job that was queued, as every way out of
    -- inProgress deletes it (tests/integration/store/test_lease_model.py holds this invariant).
    -- ON CONFLICT here and on finish_claimed's attempt row (speculative insertions) cost ~20 %
    -- of the database's CPU per job in benchmarks.pgbench.
    RETURNING job_id, claim_id, claim_expires_at, lease_seconds
),
unleased AS (
    INSERT INTO job_attempt (job_id, attempt, claim_id, job_agent_id, claimed_at)
    SELECT c.id, c.attempts, NULL, c.job_agent_id, now()
    FROM claimed AS c
    WHERE c.granted_lease IS NULL
)
SELECT c.*, c.attempts AS attempt, l.claim_id, now() AS claimed_at, l.claim_expires_at,
       l.lease_seconds
FROM claimed AS c
LEFT JOIN lease AS l ON l.job_id = c.id
ORDER BY c.created_at, c.id

-- name: claim_job
-- One statement: flip the job (only if still queued) and count the attempt on it, record the
-- lease. A concurrent claimer waits on the row lock, then sees status <> 'queued' and gets no
-- row. The lease is %(lease_seconds)s; when that is NULL and %(agent_lease)s, the agent's
-- config.leaseSeconds read here (service.resolve_lease's rule: a positive number, truncated,
-- clamped into [%(lease_min)s, %(lease_max)s]; anything else: unleased), so a V1 claim by id
-- costs no lookup of the agent first.
WITH claimed AS (
    UPDATE job AS j
    SET status = 'inProgress', started_at = now(), updated_at = now(), attempts = j.attempts + 1
    FROM job_agent AS a
    WHERE j.id = %(job_id)s AND j.job_agent_id = %(agent_id)s AND j.status = 'queued'
      AND a.id = %(agent_id)s AND a.workspace_id = %(workspace_id)s
      AND NOT EXISTS (SELECT 1 FROM job_revoked_claim AS r WHERE r.job_id = j.id)
    RETURNING j.*, COALESCE(
        %(lease_seconds)s::integer,
        -- Nested CASEs: the cast runs only on a number (CASE keeps its order, AND does not).
        CASE WHEN %(agent_lease)s::boolean
                  AND jsonb_typeof(a.config -> 'leaseSeconds') = 'number'
             THEN CASE WHEN (a.config ->> 'leaseSeconds')::numeric > 0
                       THEN GREATEST(%(lease_min)s::integer,
                                     LEAST(%(lease_max)s::integer,
                                           trunc((a.config ->> 'leaseSeconds')::numeric)))::integer
                  END
        END) AS granted_lease
),
-- include: claim_tail

-- fragment: queued_of_agent
-- The agent's queued jobs, oldest first (the agent in the caller's workspace).
    SELECT j.id
    FROM job AS j
    WHERE j.job_agent_id = %(agent_id)s AND j.status = 'queued'
      AND EXISTS (SELECT 1 FROM job_agent AS a
                  WHERE a.id = %(agent_id)s AND a.workspace_id = %(workspace_id)s)
      AND NOT EXISTS (SELECT 1 FROM job_revoked_claim AS r WHERE r.job_id = j.id)
    ORDER BY j.created_at, j.id

-- fragment: flip_picked
claimed AS (
    UPDATE job AS j
    SET status = 'inProgress', started_at = now(), updated_at = now(), attempts = j.attempts + 1
    FROM picked AS p
    WHERE j.id = p.id
    RETURNING j.*, %(lease_seconds)s::integer AS granted_lease
),

-- name: claim_next
-- As claim_job, for the agent's oldest queued job; SKIP LOCKED lets concurrent claimers take
-- the next rows instead of queueing behind each other. LIMIT 1 is written out: with a
-- parameter there, the prepared statement's generic plan expects a tenth of the queue, so
-- PostgreSQL would plan every execution anew (claim_batch pays that, once per batch).
WITH picked AS (
-- include: queued_of_agent
    LIMIT 1
    FOR UPDATE SKIP LOCKED
),
-- include: flip_picked
-- include: claim_tail

-- name: claim_batch
-- claim_next for the agent's `limit` oldest queued jobs, each with its own claim.
WITH picked AS (
-- include: queued_of_agent
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
-- include: flip_picked
-- include: claim_tail

-- name: heartbeat
-- Touches job_claim only (an unindexed column: a HOT update); revives an expired row that the
-- reaper has not taken yet.
UPDATE job_claim AS c
SET lease_seconds = COALESCE(%(lease_seconds)s::integer, c.lease_seconds),
    claim_expires_at = now()
        + make_interval(secs => COALESCE(%(lease_seconds)s::integer, c.lease_seconds)),
    -- The agent's last output time (its clock) when given, never later than now.
    -- (LEAST skips NULLs, hence the CASE.)
    last_output_at = CASE WHEN %(last_output_at)s::double precision IS NULL THEN c.last_output_at
                          ELSE LEAST(to_timestamp(%(last_output_at)s::double precision), now())
                     END
WHERE c.job_id = %(job_id)s
  AND (%(claim_id)s::uuid IS NULL OR c.claim_id = %(claim_id)s::uuid)
  AND (%(agent_scope)s::uuid IS NULL OR c.job_agent_id = %(agent_scope)s::uuid)
  AND EXISTS (SELECT 1 FROM job AS j
              WHERE j.id = c.job_id AND j.workspace_id = %(workspace_id)s)
RETURNING c.job_id, c.claim_id, c.attempt, c.lease_seconds, c.claim_expires_at, c.job_agent_id

-- name: lock_claim
-- The lock order of every writer that waits for locks: the claim row, then the job row
-- (finish_claimed deletes the claim, then updates the job). set_status's locked path takes
-- the claim row's lock first in its own statement, and notes for the rest of the transaction
-- whether there was one (claim_appeared reads it); the reaper takes both with SKIP LOCKED.
WITH claim AS (SELECT c.job_id FROM job_claim AS c WHERE c.job_id = %(job_id)s FOR UPDATE)
SELECT set_config('jobagentctl.claim_locked', count(*)::text, true) AS locked FROM claim

-- name: lock_job
-- set_status locks the job row next, in its own statement, so that the statements after it
-- (each a new snapshot) read the claim row as it is now.
SELECT j.id FROM job AS j WHERE j.id = %(job_id)s FOR UPDATE

-- name: claim_appeared
-- After both locks: a claim row that lock_claim did not find (a claim committed between the
-- two locks). Its row is not locked by us and deleting it now would take the locks out of
-- order: the transaction starts again (postgres.py). With the job's lock held, no claim row
-- can appear or go any more.
SELECT c.job_id FROM job_claim AS c
WHERE c.job_id = %(job_id)s AND current_setting('jobagentctl.claim_locked') = '0'

-- name: status_context
SELECT j.*,
       c.claim_id AS current_claim_id,
       c.attempt AS current_attempt,
       (SELECT t.outcome FROM job_attempt AS t
        WHERE t.job_id = j.id AND t.claim_id = %(claim_id)s::uuid) AS given_claim_outcome
FROM job AS j
LEFT JOIN job_claim AS c ON c.job_id = j.id
WHERE j.id = %(job_id)s AND j.workspace_id = %(workspace_id)s
  AND (%(agent_scope)s::uuid IS NULL OR j.job_agent_id = %(agent_scope)s::uuid)

-- fragment: end_released
-- The attempt of the claim row deleted as "released", its row written once from it.
    INSERT INTO job_attempt (job_id, attempt, claim_id, job_agent_id, claimed_at, ended_at,
                             outcome)
    SELECT r.job_id, r.attempt, r.claim_id, r.job_agent_id, r.claimed_at, now(),
           %(outcome)s::text
    FROM released AS r

-- fragment: wake_updated
-- Long-polls of the agent of a job the statement queued ("updated"), woken at commit.
    SELECT pg_notify('jobagentctl_job_queued', u.job_agent_id::text)
    FROM updated AS u
    WHERE u.status = 'queued' AND u.job_agent_id IS NOT NULL

-- name: finish_claimed
-- The common status update in one fenced statement: the holder of the claim moves its job out
-- of inProgress. The claim row is deleted (the fence: this claim id, the job in scope and
-- inProgress), the attempt's row is written once from it (a plain insert: its number was
-- counted on the job row under its lock, no other row has it), and the job takes the status.
-- No row back = refused or a repeat: only then does the store read why (the locked path).
WITH released AS (
    DELETE FROM job_claim AS c
    WHERE c.job_id = %(job_id)s AND c.claim_id = %(claim_id)s::uuid
      AND EXISTS (SELECT 1 FROM job AS j
                  WHERE j.id = c.job_id AND j.workspace_id = %(workspace_id)s
                    AND j.status = 'inProgress'
                    AND (%(agent_scope)s::uuid IS NULL OR j.job_agent_id = %(agent_scope)s::uuid))
    RETURNING c.job_id, c.attempt, c.claim_id, c.job_agent_id, c.claimed_at
),
ended AS (
-- include: end_released
),
updated AS (
    UPDATE job AS j
    SET status = %(status)s::text,
        updated_at = now(),
        message = COALESCE(%(message)s::text, j.message),
        external_id = COALESCE(%(external_id)s::text, j.external_id),
        metadata = CASE WHEN %(metadata)s::jsonb IS NULL THEN j.metadata
                        ELSE j.metadata || %(metadata)s::jsonb END,
        completed_at = CASE WHEN %(terminal)s::boolean THEN now() END
    FROM released AS r
    WHERE j.id = r.job_id
    RETURNING j.id, j.status, j.job_agent_id
),
woken AS (
-- include: wake_updated
)
SELECT u.id, u.status, u.job_agent_id, (SELECT count(*) FROM woken) AS woken FROM updated AS u

-- name: finish_unclaimed
-- The common status update without a claim id (a V1 agent reporting on its unleased claim, an
-- operator's change to a job that no claim row holds) in one statement, where the locked path
-- is a transaction of 4 round trips. It writes only on the job row its snapshot read: `seen`
-- finds the job in scope, without a claim row, and not a repeat of its terminal status (the
-- locked path answers a repeat), and the UPDATE applies only while the row's version (xmin)
-- is that one. Every write that adds or ends a claim, or ends an attempt, also writes the job
-- row, so an unchanged job row means no claim row appeared since the snapshot (one that did
-- would be left behind by this statement: the locked path takes its lock first). No row back
-- = a claim row, a repeat, a job out of scope, or a job changed meanwhile: the locked path
-- decides. Otherwise as apply_status without a claim row: the open (unleased) attempt is
-- ended when the job leaves inProgress; long-polls are woken when it is queued.
WITH seen AS (
    SELECT j.id, j.xmin AS version
    FROM job AS j
    WHERE j.id = %(job_id)s AND j.workspace_id = %(workspace_id)s
      AND (%(agent_scope)s::uuid IS NULL OR j.job_agent_id = %(agent_scope)s::uuid)
      AND NOT (%(terminal)s::boolean AND j.status = %(status)s::text)
      AND NOT EXISTS (SELECT 1 FROM job_claim AS c WHERE c.job_id = j.id)
),
updated AS (
    UPDATE job AS j
    SET status = %(status)s::text,
        updated_at = now(),
        message = COALESCE(%(message)s::text, j.message),
        external_id = COALESCE(%(external_id)s::text, j.external_id),
        metadata = j.metadata || COALESCE(%(metadata)s::jsonb, '{}'::jsonb),
        started_at = CASE WHEN %(status)s::text = 'inProgress' AND j.status <> 'inProgress'
                          THEN now() ELSE j.started_at END,
        completed_at = CASE WHEN %(terminal)s::boolean THEN now() END
    FROM seen AS s
    WHERE j.id = s.id AND j.xmin = s.version
    RETURNING j.id, j.status, j.job_agent_id
),
closed AS (
    UPDATE job_attempt AS t
    SET ended_at = now(), outcome = %(outcome)s::text
    FROM updated AS u
    WHERE t.job_id = u.id AND t.ended_at IS NULL AND %(status)s::text <> 'inProgress'
),
woken AS (
-- include: wake_updated
)
SELECT u.id, u.status, u.job_agent_id, (SELECT count(*) FROM woken) AS woken FROM updated AS u

-- name: apply_status
-- Write the status (a terminal one sets completed_at, any other clears it: the job is no longer
-- finished; started_at is the latest claim's); away from inProgress also end the lease (its
-- attempt's row is written once, from the claim row) or close an unleased attempt's open row;
-- wake long-polls when the job is queued again.
WITH updated AS (
    UPDATE job AS j
    SET status = %(status)s::text,
        updated_at = now(),
        message = COALESCE(%(message)s::text, j.message),
        external_id = COALESCE(%(external_id)s::text, j.external_id),
        metadata = j.metadata || COALESCE(%(metadata)s::jsonb, '{}'::jsonb),
        started_at = CASE WHEN %(status)s::text = 'inProgress' AND j.status <> 'inProgress'
                          THEN now() ELSE j.started_at END,
        completed_at = CASE WHEN %(terminal)s::boolean THEN now() END
    WHERE j.id = %(job_id)s
    RETURNING j.*
),
released AS (
    DELETE FROM job_claim AS c
    WHERE c.job_id = %(job_id)s AND %(status)s::text <> 'inProgress'
    RETURNING c.job_id, c.attempt, c.claim_id, c.job_agent_id, c.claimed_at,
              c.claim_expires_at, c.lease_seconds
),
ended AS (
-- include: end_released
    ON CONFLICT (job_id, attempt) DO UPDATE
    SET ended_at = excluded.ended_at, outcome = excluded.outcome
),
revoked AS (
    -- The claim ended here without its holder (revoke: no claim id, no force): kept as
    -- revoked (the job not claimable) until the holder reports with it or its lease runs out.
    INSERT INTO job_revoked_claim (job_id, job_agent_id, claim_id, attempt, claimed_at,
                                   claim_expires_at, lease_seconds, revoked_at)
    SELECT r.job_id, r.job_agent_id, r.claim_id, r.attempt, r.claimed_at, r.claim_expires_at,
           r.lease_seconds, now()
    FROM released AS r
    WHERE %(revoke)s::boolean
    ON CONFLICT (job_id) DO UPDATE
    SET job_agent_id = excluded.job_agent_id, claim_id = excluded.claim_id,
        attempt = excluded.attempt, claimed_at = excluded.claimed_at,
        claim_expires_at = excluded.claim_expires_at, lease_seconds = excluded.lease_seconds,
        revoked_at = excluded.revoked_at
),
forced AS (
    DELETE FROM job_revoked_claim AS r WHERE r.job_id = %(job_id)s AND %(force)s::boolean
),
closed AS (
    UPDATE job_attempt AS t
    SET ended_at = now(), outcome = %(outcome)s::text
    WHERE t.job_id = %(job_id)s AND t.ended_at IS NULL AND %(status)s::text <> 'inProgress'
      AND NOT EXISTS (SELECT 1 FROM released AS r WHERE r.attempt = t.attempt)
    RETURNING t.attempt
),
woken AS (
-- include: wake_updated
)
SELECT u.*, (SELECT count(*) FROM woken) AS woken FROM updated AS u

-- name: reap
-- One batch in one statement. The expired claims AND their jobs are locked with SKIP LOCKED:
-- concurrent reapers split the rows instead of reaping one twice, and a row whose job is held
-- by a set_status (which locks job, then claim) is left for the next pass instead of
-- deadlocking. The N-th expiry with N >= max_reclaims fails the job instead of requeueing it.
-- Outage grace (reaper.py): a lease that ran out since the outage began is spared until one
-- heartbeat interval after the store came back: a third of the lease within
-- [heartbeat_min, heartbeat_max] seconds, as models.heartbeat_interval says.
-- `more`: the statement found one expired claim beyond its batch, so the pass goes on; a pass
-- whose last batch was exactly full ends there instead of with a statement that finds nothing.
WITH async_commit AS (
    -- This statement's transaction alone commits without waiting for its WAL flush (the
    -- setting ends with it). A reap lost in a crash leaves what was there before it: claims
    -- still expired, their jobs inProgress, no attempt row, so a later pass reaps them again;
    -- and a durable commit that saw the reap (a claim of a requeued job) flushed the WAL up to
    -- itself, the reap's commit record included (docs/operators.md, "The reaper's commits").
    SELECT set_config('synchronous_commit', 'off', true) AS synchronous_commit
),
expiring AS (
    SELECT c.job_id
    FROM job_claim AS c
    WHERE c.claim_expires_at < now()
      AND NOT (c.claim_expires_at >= now() - make_interval(secs => %(outage_began_ago)s::float8)
               AND %(outage_ended_ago)s::float8
                   < LEAST(%(heartbeat_max)s::float8,
                           GREATEST(%(heartbeat_min)s::float8, c.lease_seconds / 3.0)))
    LIMIT %(batch_size)s + 1  -- the batch, and one more to tell whether there is more
    FOR UPDATE OF c SKIP LOCKED
),
expired AS (
    -- The batch's jobs locked by its keys (a join of job_claim with job was a hash over the
    -- whole job table: a third of the batch at 10k jobs); a claim whose job is held stays.
    SELECT j.id AS job_id
    FROM job AS j
    WHERE j.id = ANY (ARRAY(SELECT e.job_id FROM expiring AS e LIMIT %(batch_size)s))
    FOR UPDATE OF j SKIP LOCKED
),
deleted AS (
    -- "= ANY (ARRAY(...))": an index scan of the batch's keys, where a join with the CTE was
    -- planned as a hash of the whole table (10k claims: most of the pass; benchmarks.explain_reaper).
    DELETE FROM job_claim AS c
    WHERE c.job_id = ANY (ARRAY(SELECT e.job_id FROM expired AS e))
    RETURNING c.job_id, c.attempt, c.claim_id, c.job_agent_id, c.claimed_at
),
attempts AS (
    -- The expired attempt's row, written once from its claim row.
    INSERT INTO job_attempt (job_id, attempt, claim_id, job_agent_id, claimed_at, ended_at,
                             outcome)
    SELECT d.job_id, d.attempt, d.claim_id, d.job_agent_id, d.claimed_at, now(), 'expired'
    FROM deleted AS d
    -- A plain insert: a leased attempt's row does not exist before it ends (as in finish_claimed).
    RETURNING job_id
),
flipped AS (
    -- By the index of the batch's keys, and no join with another CTE: the planner takes a CTE
    -- for 10 rows and joined 500 x 500 in a nested loop (53 ms of a 70 ms batch over 100k
    -- finished jobs; benchmarks.explain_reaper). The N-th expiry is counted by hand (the
    -- statement's snapshot does not see the attempt closed above), and only for a
    -- max_reclaims (0, the default: no lookup per reaped job).
    UPDATE job AS j
    SET (status, message, completed_at, updated_at) = (
        SELECT CASE WHEN n.failed THEN 'failure' ELSE 'queued' END,
               CASE WHEN n.failed THEN 'lease expired ' || n.expiries || ' times'
                    ELSE j.message END,
               CASE WHEN n.failed THEN now() ELSE j.completed_at END,
               now()
        FROM (SELECT e.expiries,
                     %(max_reclaims)s::integer > 0
                     AND e.expiries >= %(max_reclaims)s::integer AS failed
              FROM (SELECT CASE WHEN %(max_reclaims)s::integer > 0
                                THEN 1 + (SELECT count(*) FROM job_attempt AS t
                                          WHERE t.job_id = j.id AND t.outcome = 'expired')
                                ELSE 0 END AS expiries) AS e) AS n)
    WHERE j.status = 'inProgress'
      AND j.id = ANY (ARRAY(SELECT d.job_id FROM deleted AS d))
    RETURNING j.id, j.status, j.job_agent_id
),
woken AS (
    -- One notification per agent saying how many of its jobs were requeued ("<agent>:<n>"):
    -- PostgreSQL folds identical payloads of one transaction into one.
    SELECT pg_notify('jobagentctl_job_queued', q.job_agent_id::text || ':' || q.jobs)
    FROM (SELECT f.job_agent_id, count(*) AS jobs FROM flipped AS f
          WHERE f.status = 'queued' AND f.job_agent_id IS NOT NULL
          GROUP BY f.job_agent_id) AS q
)
SELECT (SELECT count(*) FROM deleted) AS reaped,
       (SELECT count(*) FROM expiring) > %(batch_size)s AS more,
       (SELECT synchronous_commit FROM async_commit) AS synchronous_commit,
       (SELECT count(*) FROM attempts) AS closed,
       (SELECT count(*) FROM flipped WHERE status = 'queued') AS requeued,
       (SELECT count(*) FROM flipped WHERE status = 'failure') AS failed,
       ARRAY(SELECT f.job_agent_id FROM flipped AS f
             WHERE f.status = 'queued' AND f.job_agent_id IS NOT NULL) AS requeued_agents,
       (SELECT count(*) FROM woken) AS woken

-- name: release_revoked
-- The holder of a revoked claim reports with its claim id (refused, or a repeat), so its
-- command has ended: the job no longer waits for it, and its agent's long-polls are woken on
-- every replica when it is queued.
WITH released AS (
    DELETE FROM job_revoked_claim AS r
    WHERE r.job_id = %(job_id)s AND r.claim_id = %(claim_id)s::uuid
      AND EXISTS (SELECT 1 FROM job AS j
                  WHERE j.id = r.job_id AND j.workspace_id = %(workspace_id)s
                    AND (%(agent_scope)s::uuid IS NULL OR j.job_agent_id = %(agent_scope)s::uuid))
    RETURNING r.job_id
),
updated AS (
    SELECT j.id, j.status, j.job_agent_id FROM job AS j JOIN released AS r ON r.job_id = j.id
),
woken AS (
-- include: wake_updated
)
SELECT u.*, (SELECT count(*) FROM woken) AS woken FROM updated AS u

-- name: reap_revoked
-- Revoked claims whose lease ran out (their holder no longer heartbeats, so no outage grace):
-- the jobs stop waiting for them; their agents' long-polls are woken on every replica.
WITH released AS (
    DELETE FROM job_revoked_claim AS r
    WHERE r.claim_expires_at < now()
    RETURNING r.job_id
),
updated AS (
    SELECT j.id, j.status, j.job_agent_id FROM job AS j JOIN released AS r ON r.job_id = j.id
),
woken AS (
-- include: wake_updated
)
SELECT (SELECT count(*) FROM released) AS released,
       ARRAY(SELECT u.job_agent_id FROM updated AS u
             WHERE u.status = 'queued' AND u.job_agent_id IS NOT NULL) AS queued_agents,
       (SELECT count(*) FROM woken) AS woken
