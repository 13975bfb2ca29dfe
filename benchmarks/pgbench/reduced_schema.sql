-- Schema changes of the reduced-write variant, on top of the project's migrations: nothing on
-- the hot path that it does not need. The in-progress partial index (only inspect-claims reads
-- it) is maintained on every claim and completion; the foreign keys of job_claim and
-- job_attempt cost a lookup and a row lock on job per insert. Job rows are never deleted while
-- claims or attempts exist (deleting an agent keeps its jobs), so the cascade is not needed on
-- the hot path; a job deletion would delete its claim and attempts explicitly.
DROP INDEX IF EXISTS job_in_progress_idx;
ALTER TABLE job_claim DROP CONSTRAINT IF EXISTS job_claim_job_id_fkey;
ALTER TABLE job_attempt DROP CONSTRAINT IF EXISTS job_attempt_job_id_fkey;
