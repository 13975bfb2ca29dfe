-- Named statements of the PostgreSQL store. A block runs from its "-- name: x" line to the next.
-- Every lease time is now(): the database clock, one value per statement (autocommit) or per
-- transaction. Nullable parameters carry casts so PostgreSQL never has to guess their type.

-- name: migrate_lock
-- Replicas starting together migrate one after the other; the lock ends with the transaction.
SELECT pg_advisory_xact_lock(7236501981004)

-- name: unbounded
SET LOCAL statement_timeout = 0

-- name: migrations_table
CREATE TABLE IF NOT EXISTS schema_migrations (
    version     integer PRIMARY KEY,
    applied_at  timestamptz NOT NULL DEFAULT now()
)

-- name: applied_versions
-- With the compat header each version was applied with (NULL before the column).
SELECT version, compat FROM schema_migrations ORDER BY version

-- name: compat_column
-- Whether schema_migrations has its compat column (added by a release of 0.4.0 on).
SELECT count(*) AS found FROM information_schema.columns
WHERE table_schema = current_schema() AND table_name = 'schema_migrations'
  AND column_name = 'compat'

-- name: add_compat_column
-- Nullable: the previous release's record_migration, which names no compat, still runs.
ALTER TABLE schema_migrations ADD COLUMN compat text

-- name: write_probe
-- (SQLite's readiness probe after a failed write; unused on PostgreSQL.)
INSERT INTO store_probe (id, pad) VALUES (1, decode(repeat('00', 65536), 'hex'))
ON CONFLICT (id) DO UPDATE SET pad = excluded.pad

-- name: record_migration
INSERT INTO schema_migrations (version, applied_at, compat)
VALUES (%(version)s, now(), %(compat)s)

-- name: ping
SELECT 1 AS ok

-- name: create_workspace
INSERT INTO workspace (id, name, slug, created_at)
VALUES (%(id)s, %(name)s, %(slug)s, now())

-- name: get_workspace
SELECT id, name, slug, created_at FROM workspace WHERE id = %(id)s

-- name: get_workspace_by_slug
SELECT id, name, slug, created_at FROM workspace WHERE slug = %(slug)s

-- name: workspace_exists
SELECT 1 AS found FROM workspace WHERE id = %(id)s

-- name: create_api_key
INSERT INTO api_key (id, workspace_id, job_agent_id, prefix, secret_hash, created_at)
SELECT %(id)s, w.id, %(job_agent_id)s::uuid, %(prefix)s, %(secret_hash)s, now()
FROM workspace AS w
WHERE w.id = %(workspace_id)s
  AND (%(job_agent_id)s::uuid IS NULL OR EXISTS (
        SELECT 1 FROM job_agent AS a
        WHERE a.id = %(job_agent_id)s::uuid AND a.workspace_id = w.id))
RETURNING id

-- name: get_api_key
SELECT id, workspace_id, job_agent_id, prefix, secret_hash, created_at, revoked_at
FROM api_key
WHERE prefix = %(prefix)s

-- name: revoke_api_key
UPDATE api_key SET revoked_at = now()
WHERE id = %(id)s AND revoked_at IS NULL
RETURNING id

-- name: upsert_agent
-- The WHERE of DO UPDATE keeps an id of another workspace untouched (no row comes back).
INSERT INTO job_agent (id, workspace_id, name, type, config, metadata, created_at, updated_at)
VALUES (%(id)s, %(workspace_id)s, %(name)s, %(type)s, %(config)s::jsonb,
        COALESCE(%(metadata)s::jsonb, '{}'::jsonb), now(), now())
ON CONFLICT (id) DO UPDATE
SET name = excluded.name,
    type = excluded.type,
    config = excluded.config,
    metadata = COALESCE(%(metadata)s::jsonb, job_agent.metadata),
    updated_at = excluded.updated_at
WHERE job_agent.workspace_id = excluded.workspace_id
RETURNING *

-- name: get_agent
SELECT * FROM job_agent WHERE id = %(id)s AND workspace_id = %(workspace_id)s

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
                     OR p.last_seen_at < now() - make_interval(secs => %(window)s::float8)
                    THEN 'offline'
                WHEN EXISTS (SELECT 1 FROM job AS j
                             WHERE j.job_agent_id = a.id AND j.status = 'inProgress')
                     OR EXISTS (SELECT 1 FROM job_revoked_claim AS r
                                WHERE r.job_agent_id = a.id) THEN 'busy'
                ELSE 'idle' END AS state
    FROM job_agent AS a
    LEFT JOIN job_agent_presence AS p ON p.job_agent_id = a.id

-- name: list_agents
-- With each agent's presence (fragment agent_presence), filtered by state when not NULL.
SELECT *, count(*) OVER () AS total
FROM (
    SELECT a.*,
-- include: agent_presence
    WHERE a.workspace_id = %(workspace_id)s
) AS agents
WHERE %(state)s::text IS NULL OR state = %(state)s::text
ORDER BY created_at, id
LIMIT %(limit)s OFFSET %(offset)s

-- name: delete_agent
DELETE FROM job_agent WHERE id = %(id)s AND workspace_id = %(workspace_id)s RETURNING id

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
-- What both claims do after flipping the job (CTE `claimed`, the job rows as now): record the
-- lease, one claim row per job (its own random claim id); an unleased (V1) claim has no claim
-- row, so it opens its attempt row here (a leased attempt's row is written once, when it ends,
-- from the claim row). Answers the claimed jobs, oldest first.
lease AS (
    INSERT INTO job_claim (job_id, job_agent_id, claimed_at, claim_expires_at, claim_id,
                           lease_seconds, attempt)
    SELECT c.id, c.job_agent_id, now(), now() + make_interval(secs => %(lease_seconds)s::integer),
           gen_random_uuid(), %(lease_seconds)s::integer, c.attempts
    FROM claimed AS c
    WHERE %(lease_seconds)s::integer IS NOT NULL
    -- A plain insert: no claim row exists for a job that was queued, as every way out of
    -- inProgress deletes it (tests/property holds this invariant). ON CONFLICT here and on
    -- finish_claimed's attempt row (speculative insertions) cost ~20 % of the database's CPU
    -- per job in benchmarks.pgbench.
    RETURNING job_id, claim_id, claim_expires_at, lease_seconds
),
unleased AS (
    INSERT INTO job_attempt (job_id, attempt, claim_id, job_agent_id, claimed_at)
    SELECT c.id, c.attempts, NULL, c.job_agent_id, now()
    FROM claimed AS c
    WHERE %(lease_seconds)s::integer IS NULL
)
SELECT c.*, c.attempts AS attempt, l.claim_id, now() AS claimed_at, l.claim_expires_at,
       l.lease_seconds
FROM claimed AS c
LEFT JOIN lease AS l ON l.job_id = c.id
ORDER BY c.created_at, c.id

-- name: claim_job
-- One statement: flip the job (only if still queued) and count the attempt on it, record the
-- lease. A concurrent claimer waits on the row lock, then sees status <> 'queued' and gets no
-- row.
WITH claimed AS (
    UPDATE job AS j
    SET status = 'inProgress', started_at = now(), updated_at = now(), attempts = j.attempts + 1
    WHERE j.id = %(job_id)s AND j.job_agent_id = %(agent_id)s AND j.status = 'queued'
      AND EXISTS (SELECT 1 FROM job_agent AS a
                  WHERE a.id = %(agent_id)s AND a.workspace_id = %(workspace_id)s)
      AND NOT EXISTS (SELECT 1 FROM job_revoked_claim AS r WHERE r.job_id = j.id)
    RETURNING j.*
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
    RETURNING j.*
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

-- fragment: claim_marks
-- The claims of inProgress jobs (list_claims, urgent_claims and claim_counts read them),
-- each with its mark: its state, or `stale` for an active claim
-- silent (no heartbeat, else no claim) for longer than stale_after seconds (NULL: never), else
-- `quiet` for one whose command printed nothing (its last output, else the claim) for longer
-- than quiet_after seconds (NULL: never).
-- A new kind of claim is a new mark here; urgent_claims ranks it, claim_counts counts it.
SELECT *,
       CASE WHEN state = 'active' AND silent_since < now() - make_interval(
                secs => %(stale_after)s::float8) THEN 'stale'
            WHEN state = 'active' AND quiet_since < now() - make_interval(
                secs => %(quiet_after)s::float8) THEN 'quiet'
            ELSE state END AS mark
FROM (
    SELECT j.id AS job_id,
           COALESCE(j.job_agent_id, c.job_agent_id, t.job_agent_id) AS job_agent_id,
           c.claim_id,
           COALESCE(c.attempt, t.attempt) AS attempt,
           COALESCE(c.claimed_at, t.claimed_at, j.started_at) AS claimed_at,
           c.claim_expires_at,
           c.lease_seconds,
           CASE WHEN c.job_id IS NULL THEN 'unleased'
                WHEN c.claim_expires_at < now() THEN 'expired'
                ELSE 'active' END AS state,
           COALESCE(c.claim_expires_at - make_interval(secs => c.lease_seconds),
                    c.claimed_at) AS silent_since,
           c.last_output_at,
           COALESCE(c.last_output_at, c.claimed_at) AS quiet_since
    FROM job AS j
    LEFT JOIN job_claim AS c ON c.job_id = j.id
    LEFT JOIN job_attempt AS t ON t.job_id = j.id AND t.ended_at IS NULL
    WHERE j.status = 'inProgress'
      AND j.workspace_id = %(workspace_id)s
      AND (%(agent_id)s::uuid IS NULL OR j.job_agent_id = %(agent_id)s::uuid)
    UNION ALL
    -- Claims an operator revoked whose holder has not let go yet (as list_claims).
    SELECT r.job_id, r.job_agent_id, r.claim_id, r.attempt, r.claimed_at, r.claim_expires_at,
           r.lease_seconds, 'revoked', r.claimed_at, NULL::timestamptz, r.claimed_at
    FROM job_revoked_claim AS r
    JOIN job AS j ON j.id = r.job_id
    WHERE j.workspace_id = %(workspace_id)s
      AND (%(agent_id)s::uuid IS NULL OR j.job_agent_id = %(agent_id)s::uuid)
) AS claims
WHERE %(state)s::text = 'all' OR state = %(state)s::text

-- name: list_claims
-- inProgress jobs with their claim row (active/expired) or without one (unleased).
-- Built on claim_marks (its marks unused here: no stale_after or quiet_after is given).
SELECT *, count(*) OVER () AS total FROM (
-- include: claim_marks
) AS marked
ORDER BY claimed_at, job_id
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

-- name: claim_stats
SELECT
    (SELECT count(*) FROM job_claim WHERE claim_expires_at >= now()) AS active,
    (SELECT count(*) FROM job_claim WHERE claim_expires_at < now()) AS expired,
    (SELECT count(*) FROM job AS j
     WHERE j.status = 'inProgress'
       AND NOT EXISTS (SELECT 1 FROM job_claim AS c WHERE c.job_id = j.id)) AS unleased,
    (SELECT count(*) FROM job_revoked_claim) AS revoked,
    COALESCE((SELECT extract(epoch FROM now() - min(claimed_at)) FROM job_claim), 0)
        AS oldest_age_seconds

-- name: log_append
-- Append a request's chunks to the log of the attempt that the claim %(claim_id)s holds (the
-- fence: no row back when it is neither the job's current claim nor its revoked claim whose
-- holder has not let go; nothing is written). The fence takes FOR KEY SHARE on that claim row:
-- whatever ends the attempt or lets go of it deletes the row, so it waits for this append's
-- commit, and an append that comes after it finds no row. So an ended attempt's log is
-- complete once its end is visible. KEY SHARE does not conflict with a heartbeat's update.
-- The attempt's row hands out seqs and offsets under its row lock, so concurrent appends to
-- one attempt get disjoint ranges and commit in seq order. The chunks' bytes come as one bytea
-- (%(data)s) and a JSON list of {i, stream, at, start, len, pos}: each chunk its slice of it.
WITH live AS (
    SELECT c.job_id, c.attempt, j.workspace_id
    FROM job_claim AS c
    JOIN job AS j ON j.id = c.job_id
    WHERE c.job_id = %(job_id)s AND c.claim_id = %(claim_id)s::uuid
      AND j.workspace_id = %(workspace_id)s
      AND (%(agent_scope)s::uuid IS NULL OR c.job_agent_id = %(agent_scope)s::uuid)
    FOR KEY SHARE OF c
),
revoked AS (
    -- An operator's requeue or cancel revoked the claim: its holder's command may still print
    -- (cleanup while it is stopped) until the holder reports, or its lease runs out.
    SELECT r.job_id, r.attempt, j.workspace_id
    FROM job_revoked_claim AS r
    JOIN job AS j ON j.id = r.job_id
    WHERE r.job_id = %(job_id)s AND r.claim_id = %(claim_id)s::uuid
      AND j.workspace_id = %(workspace_id)s
      AND (%(agent_scope)s::uuid IS NULL OR r.job_agent_id = %(agent_scope)s::uuid)
    FOR KEY SHARE OF r
),
fence AS (
    SELECT * FROM live UNION ALL SELECT * FROM revoked
),
state AS (
    INSERT INTO job_log_attempt (job_id, attempt, workspace_id, next_seq, appended_bytes,
                                 stored_bytes, stored_rows, created_at, last_at)
    SELECT f.job_id, f.attempt, f.workspace_id, 1 + %(n)s::integer, %(size)s::bigint,
           %(size)s::bigint, %(n)s::integer, now(), now()
    FROM fence AS f
    ON CONFLICT (job_id, attempt) DO UPDATE
    SET next_seq = job_log_attempt.next_seq + %(n)s::integer,
        appended_bytes = job_log_attempt.appended_bytes + %(size)s::bigint,
        stored_bytes = job_log_attempt.stored_bytes + %(size)s::bigint,
        stored_rows = job_log_attempt.stored_rows + %(n)s::integer,
        last_at = now()
    RETURNING job_id, attempt, workspace_id, next_seq, appended_bytes, stored_bytes, cut_bytes,
              stored_rows
),
chunks AS (
    SELECT * FROM json_to_recordset(%(chunks)s::json)
        AS x(i integer, stream text, at float8, start integer, len integer, pos bigint)
),
inserted AS (
    INSERT INTO job_log (job_id, attempt, seq, workspace_id, byte_offset, stream, at, data)
    SELECT s.job_id, s.attempt, s.next_seq - %(n)s::integer - 1 + x.i, s.workspace_id,
           s.appended_bytes - %(size)s::bigint + x.pos, x.stream, to_timestamp(x.at),
           substring(%(data)s::bytea FROM x.start FOR x.len)
    FROM state AS s, chunks AS x
)
SELECT s.attempt, s.next_seq, s.stored_bytes, s.cut_bytes, s.stored_rows FROM state AS s

-- name: log_trim
-- The cap: when the attempt's log costs more than %(max_bytes)s — each chunk its bytes plus
-- %(row_cost)s for its row (header, key, index entry: what a tiny chunk costs on disk) — cut
-- the oldest chunks after the head (those whose cost from the log's start is under
-- %(head_bytes)s stay) down to %(low_water)s, so that trimming runs once per several appends,
-- not on each. The first chunk cut becomes the one truncation marker (same seq, same offset:
-- it sits between the head and the newest output); later trims cut the chunks after it and
-- rewrite its text with the new total. The rows are counted here, not trusted from
-- stored_rows (a release without the column leaves it off), and the count is written back.
WITH st AS (
    SELECT s.job_id, s.attempt, s.stored_bytes, s.marker_seq, s.cut_bytes
    FROM job_log_attempt AS s
    WHERE s.job_id = %(job_id)s AND s.attempt = %(attempt)s
      AND s.stored_bytes + s.stored_rows * %(row_cost)s::bigint > %(max_bytes)s
    FOR UPDATE
),
counted AS (
    SELECT count(*) AS n
    FROM job_log AS l
    JOIN st ON l.job_id = st.job_id AND l.attempt = st.attempt
),
victims AS (
    SELECT min(v.seq) AS first_cut, max(v.seq) AS last_cut, COALESCE(sum(v.len), 0) AS cut_now,
           count(v.seq) AS cut_rows
    FROM (SELECT l.seq, octet_length(l.data) AS len,
                 st.stored_bytes + c.n * %(row_cost)s::bigint AS stored_cost,
                 sum(octet_length(l.data) + %(row_cost)s::bigint) OVER (ORDER BY l.seq) AS upto
          FROM job_log AS l
          JOIN st ON l.job_id = st.job_id AND l.attempt = st.attempt
          CROSS JOIN counted AS c
          WHERE l.byte_offset + (l.seq - 1) * %(row_cost)s::bigint >= %(head_bytes)s
            AND l.seq IS DISTINCT FROM st.marker_seq) AS v
    WHERE v.upto - v.len - %(row_cost)s::bigint < v.stored_cost - %(low_water)s
),
cut AS (
    DELETE FROM job_log AS l
    USING st, victims AS v
    WHERE l.job_id = st.job_id AND l.attempt = st.attempt
      AND l.byte_offset + (l.seq - 1) * %(row_cost)s::bigint >= %(head_bytes)s
      AND l.seq <= v.last_cut
      AND l.seq <> COALESCE(st.marker_seq, v.first_cut)
),
marked AS (
    UPDATE job_log AS l
    SET stream = 'marker',
        data = convert_to('[jobagentctl: ' || (st.cut_bytes + v.cut_now)
                          || ' bytes of output cut here: the log is over its cap of '
                          || %(max_bytes)s::bigint || ' bytes]', 'UTF8')
    FROM st, victims AS v
    WHERE l.job_id = st.job_id AND l.attempt = st.attempt
      AND l.seq = COALESCE(st.marker_seq, v.first_cut)
)
UPDATE job_log_attempt AS s
SET stored_bytes = s.stored_bytes - v.cut_now,
    cut_bytes = s.cut_bytes + v.cut_now,
    marker_seq = COALESCE(s.marker_seq, v.first_cut),
    -- The rows cut, but the first one cut stays, as the new marker.
    stored_rows = c.n - v.cut_rows
                  + CASE WHEN s.marker_seq IS NULL AND v.first_cut IS NOT NULL THEN 1 ELSE 0 END
FROM st, victims AS v, counted AS c
WHERE s.job_id = st.job_id AND s.attempt = st.attempt
RETURNING s.stored_bytes, s.cut_bytes, s.stored_rows

-- name: log_state
-- A read's first question: the job in scope, its attempt (the latest when none is asked), how
-- that attempt ended (job_attempt) or that it runs (job_claim), whether the holder of its
-- revoked claim may still append (holder_writing), and its log's state.
SELECT j.status AS job_status, j.attempts AS attempts, a.n AS attempt,
       t.ended_at, t.outcome, s.next_seq, s.expired_at,
       EXISTS (SELECT 1 FROM job_revoked_claim AS r
               WHERE r.job_id = j.id AND r.attempt = a.n) AS holder_writing
FROM job AS j
CROSS JOIN LATERAL (SELECT COALESCE(%(attempt)s::integer, j.attempts) AS n) AS a
LEFT JOIN job_attempt AS t ON t.job_id = j.id AND t.attempt = a.n
LEFT JOIN job_log_attempt AS s ON s.job_id = j.id AND s.attempt = a.n
WHERE j.id = %(job_id)s AND j.workspace_id = %(workspace_id)s
  AND (%(agent_scope)s::uuid IS NULL OR j.job_agent_id = %(agent_scope)s::uuid)

-- name: log_chunks
SELECT seq, byte_offset, stream, at, data
FROM job_log
WHERE job_id = %(job_id)s AND attempt = %(attempt)s AND seq > %(after)s
ORDER BY seq
LIMIT %(limit)s

-- name: log_expire
-- Retention, one batch: the logs of attempts that ended more than %(retention_seconds)s ago
-- lose their chunks; their attempt row stays, marked expired. created_at (the first append) is
-- the index's prefilter: an attempt that ended that long ago began before that too.
WITH old AS (
    SELECT s.job_id, s.attempt
    FROM job_log_attempt AS s
    JOIN job_attempt AS t ON t.job_id = s.job_id AND t.attempt = s.attempt
    WHERE s.expired_at IS NULL
      AND s.created_at < now() - make_interval(secs => %(retention_seconds)s::float8)
      AND t.ended_at < now() - make_interval(secs => %(retention_seconds)s::float8)
    ORDER BY s.created_at
    LIMIT %(batch_size)s
    FOR UPDATE OF s SKIP LOCKED
),
gone AS (
    DELETE FROM job_log AS l USING old AS o
    WHERE l.job_id = o.job_id AND l.attempt = o.attempt
    RETURNING 1
),
marked AS (
    UPDATE job_log_attempt AS s
    SET expired_at = now(), stored_bytes = 0, stored_rows = 0
    FROM old AS o
    WHERE s.job_id = o.job_id AND s.attempt = o.attempt
    RETURNING 1
)
SELECT (SELECT count(*) FROM marked) AS expired_logs, (SELECT count(*) FROM gone) AS chunks
-- name: api_key_revoked
-- Whether the key of that id is revoked (no row: there is no such key).
SELECT revoked_at IS NOT NULL AS revoked FROM api_key WHERE id = %(id)s

-- name: urgent_claims
-- The most urgent claims first: expired (longest overdue first), then unleased or stale,
-- then the rest by nearest expiry.
SELECT * FROM (
-- include: claim_marks
) AS marked
ORDER BY CASE mark WHEN 'expired' THEN 0 WHEN 'active' THEN 2 ELSE 1 END,
         claim_expires_at IS NULL, claim_expires_at, claimed_at, job_id
LIMIT %(limit)s

-- name: claim_counts
-- How many claims there are of each mark (the marks of urgent_claims).
SELECT mark, count(*) AS n FROM (
-- include: claim_marks
) AS marked
GROUP BY mark
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

-- name: get_agent_presence
SELECT a.*,
-- include: agent_presence
WHERE a.id = %(id)s AND a.workspace_id = %(workspace_id)s

-- name: touch_agent
-- The agent was seen now (a request made for it); the server throttles these writes. Only an
-- agent of the request's workspace: another workspace's key naming it writes nothing.
INSERT INTO job_agent_presence (job_agent_id, last_seen_at)
SELECT a.id, now() FROM job_agent AS a
WHERE a.id = %(agent_id)s AND a.workspace_id = %(workspace_id)s
ON CONFLICT (job_agent_id) DO UPDATE SET last_seen_at = excluded.last_seen_at
RETURNING job_agent_id

-- name: agent_state_counts
-- For /metrics: agents by state, every workspace.
SELECT state, count(*) AS agents
FROM (
    SELECT a.id,
-- include: agent_presence
) AS agents
GROUP BY state
