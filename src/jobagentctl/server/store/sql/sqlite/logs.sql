-- The SQLite store's statements: job logs appended, capped, read and expired.
-- The dialect's conventions: schema.sql's header.

-- name: log_append
-- Append a request's chunks to the log of the attempt that the claim :claim_id holds (the
-- fence: the chain stops, writing nothing, when it is neither the job's current claim nor its
-- revoked claim whose holder has not let go). The chain holds the database's write lock from
-- its first statement, so whatever ends the attempt or lets go of it comes wholly before or
-- after it. The attempt's row hands out seqs and offsets; the chunks' bytes come as one BLOB
-- (:data) and a JSON list of {i, stream, at, start, len, pos}: each chunk its slice of it
-- (substr on a BLOB counts bytes).
SELECT c.attempt, j.workspace_id AS log_workspace_id
FROM job_claim AS c
JOIN job AS j ON j.id = c.job_id
WHERE c.job_id = :job_id AND c.claim_id = :claim_id AND j.workspace_id = :workspace_id
  AND (:agent_scope IS NULL OR c.job_agent_id = :agent_scope)
UNION ALL
SELECT r.attempt, j.workspace_id AS log_workspace_id
FROM job_revoked_claim AS r
JOIN job AS j ON j.id = r.job_id
WHERE r.job_id = :job_id AND r.claim_id = :claim_id AND j.workspace_id = :workspace_id
  AND (:agent_scope IS NULL OR r.job_agent_id = :agent_scope);
INSERT INTO job_log_attempt (job_id, attempt, workspace_id, next_seq, appended_bytes,
                             stored_bytes, stored_rows, created_at, last_at)
VALUES (:job_id, :attempt, :log_workspace_id, 1 + :n, :size, :size, :n,
        (julianday('now') - 2440587.5) * 86400.0, (julianday('now') - 2440587.5) * 86400.0)
ON CONFLICT (job_id, attempt) DO UPDATE
SET next_seq = next_seq + :n,
    appended_bytes = appended_bytes + :size,
    stored_bytes = stored_bytes + :size,
    stored_rows = stored_rows + :n,
    last_at = excluded.last_at
RETURNING next_seq, appended_bytes, stored_bytes, cut_bytes, stored_rows;
INSERT INTO job_log (job_id, attempt, seq, workspace_id, byte_offset, stream, at, data)
SELECT :job_id, :attempt, :next_seq - :n - 1 + json_extract(x.value, '$.i'), :log_workspace_id,
       :appended_bytes - :size + json_extract(x.value, '$.pos'),
       json_extract(x.value, '$.stream'), json_extract(x.value, '$.at'),
       substr(:data, json_extract(x.value, '$.start'), json_extract(x.value, '$.len'))
FROM json_each(:chunks) AS x

-- name: log_trim
-- The cap (see the PostgreSQL block of this name): when the log costs more than :max_bytes
-- (each chunk its bytes plus :row_cost), cut the oldest chunks after the head down to
-- :low_water; the first chunk cut becomes the one truncation marker. The rows are counted
-- here (rows_now) and the count written back.
SELECT stored_bytes, marker_seq, cut_bytes,
       (SELECT count(*) FROM job_log WHERE job_id = :job_id AND attempt = :attempt) AS rows_now
FROM job_log_attempt
WHERE job_id = :job_id AND attempt = :attempt
  AND stored_bytes + stored_rows * :row_cost > :max_bytes;
SELECT min(v.seq) AS first_cut, max(v.seq) AS last_cut, COALESCE(sum(v.len), 0) AS cut_now,
       count(v.seq) AS cut_rows
FROM (SELECT seq, length(data) AS len, sum(length(data) + :row_cost) OVER (ORDER BY seq) AS upto
      FROM job_log
      WHERE job_id = :job_id AND attempt = :attempt
        AND byte_offset + (seq - 1) * :row_cost >= :head_bytes
        AND seq IS NOT :marker_seq) AS v
WHERE v.upto - v.len - :row_cost < :stored_bytes + :rows_now * :row_cost - :low_water;
DELETE FROM job_log
WHERE job_id = :job_id AND attempt = :attempt
  AND byte_offset + (seq - 1) * :row_cost >= :head_bytes
  AND seq <= :last_cut AND seq <> COALESCE(:marker_seq, :first_cut);
UPDATE job_log
SET stream = 'marker',
    data = CAST('[jobagentctl: ' || (:cut_bytes + :cut_now)
                || ' bytes of output cut here: the log is over its cap of ' || :max_bytes
                || ' bytes]' AS BLOB)
WHERE job_id = :job_id AND attempt = :attempt AND seq = COALESCE(:marker_seq, :first_cut);
UPDATE job_log_attempt
SET stored_bytes = stored_bytes - :cut_now,
    cut_bytes = cut_bytes + :cut_now,
    stored_rows = :rows_now - :cut_rows
                  + CASE WHEN :marker_seq IS NULL AND :first_cut IS NOT NULL THEN 1 ELSE 0 END,
    marker_seq = COALESCE(marker_seq, :first_cut)
WHERE job_id = :job_id AND attempt = :attempt
RETURNING stored_bytes, cut_bytes, stored_rows

-- name: log_state
-- A read's first question: the job in scope, its attempt (the latest when none is asked), how
-- that attempt ended (job_attempt), whether the holder of its revoked claim may still append
-- (holder_writing), and its log's state.
SELECT j.status AS job_status, j.attempts AS attempts, a.n AS attempt,
       t.ended_at, t.outcome, s.next_seq, s.expired_at,
       EXISTS (SELECT 1 FROM job_revoked_claim AS r
               WHERE r.job_id = j.id AND r.attempt = a.n) AS holder_writing
FROM job AS j
JOIN (SELECT COALESCE(:attempt, (SELECT attempts FROM job WHERE id = :job_id)) AS n) AS a
LEFT JOIN job_attempt AS t ON t.job_id = j.id AND t.attempt = a.n
LEFT JOIN job_log_attempt AS s ON s.job_id = j.id AND s.attempt = a.n
WHERE j.id = :job_id AND j.workspace_id = :workspace_id
  AND (:agent_scope IS NULL OR j.job_agent_id = :agent_scope)

-- name: log_chunks
SELECT seq, byte_offset, stream, at, data
FROM job_log
WHERE job_id = :job_id AND attempt = :attempt AND seq > :after
ORDER BY seq
LIMIT :limit

-- fragment: expiring_logs
-- The attempts whose logs retention deletes in this batch (log_expire).
    SELECT s.job_id, s.attempt FROM job_log_attempt AS s
    JOIN job_attempt AS t ON t.job_id = s.job_id AND t.attempt = s.attempt
    WHERE s.expired_at IS NULL
      AND s.created_at < (julianday('now') - 2440587.5) * 86400.0 - :retention_seconds
      AND t.ended_at < (julianday('now') - 2440587.5) * 86400.0 - :retention_seconds
    ORDER BY s.created_at, s.job_id, s.attempt
    LIMIT :batch_size

-- name: log_expire
-- Retention, one batch (see the PostgreSQL block of this name), in one transaction: each
-- statement selects the same batch (same order, nothing else writes meanwhile).
SELECT count(*) AS expired_logs FROM (
-- include: expiring_logs
);
DELETE FROM job_log
WHERE (job_id, attempt) IN (
-- include: expiring_logs
);
UPDATE job_log_attempt
SET expired_at = (julianday('now') - 2440587.5) * 86400.0, stored_bytes = 0, stored_rows = 0
WHERE (job_id, attempt) IN (
-- include: expiring_logs
)
