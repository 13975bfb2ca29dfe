-- jobagentctl schema v4 (SQLite): fewer writes per job.
-- job.attempts counts the job's claims; the claim increments it in the UPDATE that flips the
-- job, so the attempt number is monotonic across requeues, releases, reaps and V1 status
-- changes without reading job_attempt.
ALTER TABLE job ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0;
UPDATE job SET attempts = COALESCE((SELECT MAX(t.attempt) FROM job_attempt AS t
                                    WHERE t.job_id = job.id), 0);

-- A leased attempt is no longer opened at claim time: its row is written once, when it ends,
-- from the claim row. Attempts opened by v3 whose claim is still live are removed here: their
-- row is written again when they end. (Unleased V1 claims keep their open row.)
DELETE FROM job_attempt
WHERE ended_at IS NULL
  AND EXISTS (SELECT 1 FROM job_claim AS c
              WHERE c.job_id = job_attempt.job_id AND c.attempt = job_attempt.attempt);

-- The foreign keys job_claim → job and job_attempt → job stay on SQLite: dropping a constraint
-- means rebuilding both tables, and SQLite's cost per job is its one write lock, not these
-- primary-key lookups.
