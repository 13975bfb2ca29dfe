-- The SQLite store's statements: workspaces, API keys, agents.
-- The dialect's conventions: schema.sql's header.

-- name: create_workspace
INSERT INTO workspace (id, name, slug, created_at)
VALUES (:id, :name, :slug, (julianday('now') - 2440587.5) * 86400.0)

-- name: get_workspace
SELECT id, name, slug, created_at FROM workspace WHERE id = :id

-- name: get_workspace_by_slug
SELECT id, name, slug, created_at FROM workspace WHERE slug = :slug

-- name: workspace_exists
SELECT 1 AS found FROM workspace WHERE id = :id

-- name: create_api_key
INSERT INTO api_key (id, workspace_id, job_agent_id, prefix, secret_hash, created_at)
SELECT :id, w.id, :job_agent_id, :prefix, :secret_hash, (julianday('now') - 2440587.5) * 86400.0
FROM workspace AS w
WHERE w.id = :workspace_id
  AND (:job_agent_id IS NULL OR EXISTS (
        SELECT 1 FROM job_agent AS a WHERE a.id = :job_agent_id AND a.workspace_id = w.id))
RETURNING id

-- name: get_api_key
SELECT id, workspace_id, job_agent_id, prefix, secret_hash, created_at, revoked_at
FROM api_key
WHERE prefix = :prefix

-- name: revoke_api_key
UPDATE api_key SET revoked_at = (julianday('now') - 2440587.5) * 86400.0
WHERE id = :id AND revoked_at IS NULL
RETURNING id

-- name: upsert_agent
-- The WHERE of DO UPDATE keeps an id of another workspace untouched (no row comes back).
INSERT INTO job_agent (id, workspace_id, name, type, config, metadata, created_at, updated_at)
VALUES (:id, :workspace_id, :name, :type, :config, COALESCE(:metadata, '{}'),
        (julianday('now') - 2440587.5) * 86400.0, (julianday('now') - 2440587.5) * 86400.0)
ON CONFLICT (id) DO UPDATE
SET name = excluded.name,
    type = excluded.type,
    config = excluded.config,
    metadata = COALESCE(:metadata, job_agent.metadata),
    updated_at = excluded.updated_at
WHERE job_agent.workspace_id = excluded.workspace_id
RETURNING *

-- name: get_agent
SELECT * FROM job_agent WHERE id = :id AND workspace_id = :workspace_id

-- fragment: agent_presence
-- An agent's presence, after "SELECT a.*, …": when it was last seen, what it holds (its jobs in
-- progress and its revoked claims not let go yet), and its state — offline (not seen within
-- the window, or never: whatever it holds, a dead agent is not busy), busy (holding
-- something), idle.
           p.last_seen_at,
           (SELECT COUNT(*) FROM job AS j
             WHERE j.job_agent_id = a.id AND j.status = 'inProgress')
           + (SELECT COUNT(*) FROM job_revoked_claim AS r WHERE r.job_agent_id = a.id)
               AS held_claims,
           CASE WHEN p.last_seen_at IS NULL
                     OR p.last_seen_at < (julianday('now') - 2440587.5) * 86400.0 - :window
                    THEN 'offline'
                WHEN EXISTS (SELECT 1 FROM job AS j
                             WHERE j.job_agent_id = a.id AND j.status = 'inProgress')
                     OR EXISTS (SELECT 1 FROM job_revoked_claim AS r
                                WHERE r.job_agent_id = a.id) THEN 'busy'
                ELSE 'idle' END AS state
    FROM job_agent AS a
    LEFT JOIN job_agent_presence AS p ON p.job_agent_id = a.id

-- name: list_agents
-- rowid breaks ties of equal millisecond timestamps in insertion order. With each agent's
-- presence (fragment agent_presence), filtered by :state when not NULL.
SELECT *, COUNT(*) OVER () AS total
FROM (
    SELECT a.*, a.rowid AS agent_seq,
-- include: agent_presence
    WHERE a.workspace_id = :workspace_id
) AS agents
WHERE :state IS NULL OR state = :state
ORDER BY created_at, agent_seq
LIMIT :limit OFFSET :offset

-- name: delete_agent
DELETE FROM job_agent WHERE id = :id AND workspace_id = :workspace_id RETURNING id

-- name: api_key_revoked
-- Whether the key of that id is revoked (no row: there is no such key).
SELECT revoked_at IS NOT NULL AS revoked FROM api_key WHERE id = :id

-- name: get_agent_presence
SELECT a.*,
-- include: agent_presence
WHERE a.id = :id AND a.workspace_id = :workspace_id

-- name: touch_agent
-- The agent was seen now (a request made for it); the server throttles these writes. Only an
-- agent of the request's workspace: another workspace's key naming it writes nothing.
INSERT INTO job_agent_presence (job_agent_id, last_seen_at)
SELECT a.id, (julianday('now') - 2440587.5) * 86400.0 FROM job_agent AS a
WHERE a.id = :agent_id AND a.workspace_id = :workspace_id
ON CONFLICT (job_agent_id) DO UPDATE SET last_seen_at = excluded.last_seen_at
RETURNING job_agent_id

-- name: agent_state_counts
-- For /metrics: agents by state, every workspace.
SELECT state, COUNT(*) AS agents
FROM (
    SELECT a.id,
-- include: agent_presence
) AS agents
GROUP BY state
