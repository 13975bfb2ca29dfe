-- The PostgreSQL store's statements: claims listed, ranked and counted.
-- The dialect's conventions: schema.sql's header.

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
