-- compat: expand
-- jobagentctl schema (PostgreSQL): the claim's last output time, as the agent's heartbeat
-- reports it (never later than the database clock at that heartbeat). NULL until the first
-- heartbeat that carries one: the claim is then quiet since claimed_at. The heartbeat already
-- writes this row, and the column has no index, so its updates stay HOT; a nullable column
-- without a default is a catalogue change only. A release without it never names the column.
ALTER TABLE job_claim ADD COLUMN last_output_at timestamptz;
