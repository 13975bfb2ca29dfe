-- The PostgreSQL store's statements: job logs appended, capped, read and expired.
-- The dialect's conventions: schema.sql's header.

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
