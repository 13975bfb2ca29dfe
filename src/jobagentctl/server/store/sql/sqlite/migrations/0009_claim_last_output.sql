-- compat: expand
-- jobagentctl schema (SQLite): the claim's last output time, as the agent's heartbeat reports
-- it (epoch seconds, never later than the database clock at that heartbeat). NULL until the
-- first heartbeat that carries one: the claim is then quiet since claimed_at. The heartbeat
-- already writes this row, so knowing it costs no write of its own; a release without it
-- never names the column.
ALTER TABLE job_claim ADD COLUMN last_output_at REAL;
