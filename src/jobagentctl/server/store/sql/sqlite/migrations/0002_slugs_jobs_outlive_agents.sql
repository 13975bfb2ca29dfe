-- jobagentctl schema v2 (SQLite). As ctrlplane's V1: workspaces get a unique slug, and a job
-- outlives its agent: it belongs to its workspace, and deleting the agent sets its
-- job_agent_id to NULL (the wire's jobAgentId ""). Claim and attempt rows keep the agent id
-- they were made with. SQLite cannot change a column's constraints in place: both tables are
-- rebuilt (the connector runs migrations with foreign_keys off and checks them before COMMIT).

CREATE TABLE workspace_v2 (
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL,
    slug        TEXT NOT NULL UNIQUE,
    created_at  REAL NOT NULL
);

-- Existing workspaces: the name lowercased, runs of anything but [a-z0-9] as one "-", at most
-- 50 characters ("workspace" if nothing is left); a later duplicate gets "-" and the first 8
-- characters of its id. The store derives new slugs the same way (validation.slugify).
WITH RECURSIVE walk (id, rest, out) AS (
    SELECT id, lower(name), '' FROM workspace
    UNION ALL
    SELECT id, substr(rest, 2),
           out || CASE WHEN substr(rest, 1, 1) GLOB '[a-z0-9]' THEN substr(rest, 1, 1)
                       WHEN out LIKE '%-' THEN '' ELSE '-' END
    FROM walk
    WHERE rest <> ''
),
base AS (
    SELECT w.id, w.name, w.created_at,
           COALESCE(NULLIF(trim(substr(trim(k.out, '-'), 1, 50), '-'), ''), 'workspace') AS slug
    FROM workspace AS w JOIN walk AS k ON k.id = w.id AND k.rest = ''
),
ranked AS (
    SELECT *, row_number() OVER (PARTITION BY slug ORDER BY created_at, id) AS n FROM base
)
INSERT INTO workspace_v2 (id, name, slug, created_at)
SELECT id, name,
       CASE WHEN n = 1 THEN slug ELSE trim(substr(slug, 1, 41), '-') || '-' || substr(id, 1, 8) END,
       created_at
FROM ranked
ORDER BY created_at, id;

DROP TABLE workspace;
ALTER TABLE workspace_v2 RENAME TO workspace;

CREATE TABLE job_v2 (
    id                TEXT PRIMARY KEY,
    workspace_id      TEXT NOT NULL REFERENCES workspace (id) ON DELETE CASCADE,
    job_agent_id      TEXT REFERENCES job_agent (id) ON DELETE SET NULL,
    status            TEXT NOT NULL,
    job_agent_config  TEXT NOT NULL DEFAULT '{}',
    dispatch_context  TEXT NOT NULL DEFAULT '{}',
    metadata          TEXT NOT NULL DEFAULT '{}',
    external_id       TEXT,
    message           TEXT,
    created_at        REAL NOT NULL,
    updated_at        REAL NOT NULL,
    started_at        REAL,
    completed_at      REAL
);

-- In rowid order: list_jobs breaks ties of equal timestamps by rowid.
INSERT INTO job_v2 (id, workspace_id, job_agent_id, status, job_agent_config, dispatch_context,
                    metadata, external_id, message, created_at, updated_at, started_at,
                    completed_at)
SELECT j.id, a.workspace_id, j.job_agent_id, j.status, j.job_agent_config, j.dispatch_context,
       j.metadata, j.external_id, j.message, j.created_at, j.updated_at, j.started_at,
       j.completed_at
FROM job AS j JOIN job_agent AS a ON a.id = j.job_agent_id
ORDER BY j.rowid;

DROP TABLE job;
ALTER TABLE job_v2 RENAME TO job;

CREATE INDEX job_agent_status_created_idx ON job (job_agent_id, status, created_at);
CREATE INDEX job_status_idx ON job (status);
