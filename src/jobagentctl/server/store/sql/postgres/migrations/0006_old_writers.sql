-- compat: expand
-- jobagentctl schema: the round-1 release (schema 0001) keeps writing on this schema. Its job
-- INSERT names no workspace_id and its workspace INSERT no slug, which 0002 made NOT NULL:
-- while such a server still runs (a rolling upgrade), a BEFORE INSERT trigger fills the
-- column the way this release writes it. Rows that name the column never call the functions.

CREATE OR REPLACE FUNCTION jobagentctl_job_workspace() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- The agent's workspace (an unknown agent leaves NULL: the NOT NULL check refuses it).
    SELECT a.workspace_id INTO NEW.workspace_id FROM job_agent AS a WHERE a.id = NEW.job_agent_id;
    RETURN NEW;
END
$$;

CREATE TRIGGER job_old_writer_workspace BEFORE INSERT ON job
FOR EACH ROW WHEN (NEW.workspace_id IS NULL)
EXECUTE FUNCTION jobagentctl_job_workspace();

-- The slug the store derives from a name (validation.slugify): runs of other characters as one
-- "-", at most 50 characters, "-ws" appended under 3; a taken one gets "-" and 8 characters of
-- the id, as the store does.
CREATE OR REPLACE FUNCTION jobagentctl_workspace_slug() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    derived text := trim(BOTH '-' FROM left(
        trim(BOTH '-' FROM regexp_replace(lower(NEW.name), '[^a-z0-9]+', '-', 'g')), 50));
BEGIN
    derived := COALESCE(NULLIF(derived, ''), 'workspace');
    IF length(derived) < 3 THEN
        derived := derived || '-ws';
    END IF;
    IF EXISTS (SELECT 1 FROM workspace AS w WHERE w.slug = derived) THEN
        derived := trim(BOTH '-' FROM left(derived, 41)) || '-' || left(NEW.id::text, 8);
    END IF;
    NEW.slug := derived;
    RETURN NEW;
END
$$;

CREATE TRIGGER workspace_old_writer_slug BEFORE INSERT ON workspace
FOR EACH ROW WHEN (NEW.slug IS NULL)
EXECUTE FUNCTION jobagentctl_workspace_slug();
