-- jobagentctl schema v2 (PostgreSQL). As ctrlplane's V1: workspaces get a unique slug, and a
-- job outlives its agent: it belongs to its workspace, and deleting the agent sets its
-- job_agent_id to NULL (the wire's jobAgentId ""). Claim and attempt rows keep the agent id
-- they were made with.

ALTER TABLE workspace ADD COLUMN slug text;

-- Existing workspaces: the name lowercased, runs of anything but [a-z0-9] as one "-", at most
-- 50 characters ("workspace" if nothing is left); a later duplicate gets "-" and the first 8
-- characters of its id. The store derives new slugs the same way (validation.slugify).
WITH base AS (
    SELECT id, created_at,
           COALESCE(NULLIF(trim(BOTH '-' FROM left(trim(BOTH '-' FROM
               regexp_replace(lower(name), '[^a-z0-9]+', '-', 'g')), 50)), ''), 'workspace')
               AS slug
    FROM workspace
),
ranked AS (
    SELECT id, slug, row_number() OVER (PARTITION BY slug ORDER BY created_at, id) AS n
    FROM base
)
UPDATE workspace AS w
SET slug = CASE WHEN r.n = 1 THEN r.slug
                ELSE trim(BOTH '-' FROM left(r.slug, 41)) || '-' || left(w.id::text, 8) END
FROM ranked AS r
WHERE r.id = w.id;

ALTER TABLE workspace ALTER COLUMN slug SET NOT NULL;
ALTER TABLE workspace ADD CONSTRAINT workspace_slug_key UNIQUE (slug);

ALTER TABLE job ADD COLUMN workspace_id uuid REFERENCES workspace (id) ON DELETE CASCADE;
UPDATE job AS j SET workspace_id = a.workspace_id FROM job_agent AS a WHERE a.id = j.job_agent_id;
ALTER TABLE job ALTER COLUMN workspace_id SET NOT NULL;
ALTER TABLE job ALTER COLUMN job_agent_id DROP NOT NULL;
ALTER TABLE job DROP CONSTRAINT job_job_agent_id_fkey;
ALTER TABLE job ADD CONSTRAINT job_job_agent_id_fkey
    FOREIGN KEY (job_agent_id) REFERENCES job_agent (id) ON DELETE SET NULL;
