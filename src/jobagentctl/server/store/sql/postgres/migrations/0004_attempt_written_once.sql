-- jobagentctl schema v4 (PostgreSQL): fewer writes per job.
-- job.attempts counts the job's claims. The claim increments it in the UPDATE that flips the
-- job (under the job's row lock, re-read at the latest row version), so the attempt number is
-- monotonic across requeues, releases, reaps and V1 status changes without reading job_attempt
-- (no "max(attempt)" lookup per claim, no primary-key race between concurrent re-claims).
ALTER TABLE job ADD COLUMN attempts integer NOT NULL DEFAULT 0;
UPDATE job AS j SET attempts = t.n
FROM (SELECT job_id, max(attempt) AS n FROM job_attempt GROUP BY job_id) AS t
WHERE t.job_id = j.id;

-- A leased attempt is no longer opened at claim time: its row is written once, when it ends,
-- from the claim row (complete, release, cancel, reap). The running attempt is read from
-- job_claim. Attempts opened by v3 whose claim is still live are removed here: their row is
-- written again when they end. (Unleased V1 claims have no claim row: they keep their open row.)
DELETE FROM job_attempt AS t
USING job_claim AS c
WHERE t.job_id = c.job_id AND t.attempt = c.attempt AND t.ended_at IS NULL;

-- Dropped: the foreign keys job_claim → job and job_attempt → job. Each claim and each ended
-- attempt paid an index lookup on job and a KEY SHARE lock check for them, and nothing needs
-- the cascade: the store never deletes a job row (deleting an agent keeps its jobs, v2, and
-- no operation deletes a workspace). Kept: job_in_progress_idx, which inspect-claims over a
-- whole workspace reads (without it that listing scans every job of the workspace).
ALTER TABLE job_claim DROP CONSTRAINT IF EXISTS job_claim_job_id_fkey;
ALTER TABLE job_attempt DROP CONSTRAINT IF EXISTS job_attempt_job_id_fkey;
