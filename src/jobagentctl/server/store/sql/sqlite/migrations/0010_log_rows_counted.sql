-- compat: expand
-- jobagentctl schema (SQLite): how many chunk rows an attempt's log holds, so that the cap
-- counts each row's fixed cost on disk (header, key, index entry) beside its bytes: a log of
-- tiny chunks is cut as its rows add up, not only its bytes. A release without it never names
-- the column: its appends leave the count low and its cuts leave it high, and the next cut by
-- this release counts the rows again.
ALTER TABLE job_log_attempt ADD COLUMN stored_rows INTEGER NOT NULL DEFAULT 0;
