-- compat: expand
-- jobagentctl schema (PostgreSQL): how many chunk rows an attempt's log holds, so that the cap
-- counts each row's fixed cost on disk (header, key, index entry) beside its bytes: a log of
-- tiny chunks is cut as its rows add up, not only its bytes. A constant default is a
-- catalogue change only; the column has no index, so an append's update stays HOT. A release
-- without it never names the column: its appends leave the count low and its cuts leave it
-- high, and the next cut by this release counts the rows again.
ALTER TABLE job_log_attempt ADD COLUMN stored_rows integer NOT NULL DEFAULT 0;
