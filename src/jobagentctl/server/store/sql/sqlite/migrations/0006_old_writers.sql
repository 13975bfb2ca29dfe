-- compat: expand
-- jobagentctl schema (SQLite): the round-1 release (schema 0001) keeps writing on this schema.
-- Its job INSERT names no workspace_id and its workspace INSERT no slug, which 0002 made NOT
-- NULL. SQLite cannot change NEW in a BEFORE trigger, and skipping the row (RAISE(IGNORE))
-- would empty the old INSERT's RETURNING: both columns get the default '' instead, and an
-- AFTER INSERT trigger replaces it the way this release writes it. Rows that name the column
-- never fire the triggers.
--
-- A column's default is changed in place as SQLite documents it ("ALTER TABLE", section
-- "Making Other Kinds Of Table Schema Changes": adding a default changes no stored row), which
-- a table rebuild would not be: no row is copied, and columns other migrations add survive.
-- RESET reloads this connection's schema, so a later ALTER TABLE here reads the new text.
PRAGMA writable_schema = ON;
UPDATE sqlite_master
SET sql = replace(sql, 'workspace_id      TEXT NOT NULL REFERENCES workspace (id)',
                       'workspace_id      TEXT NOT NULL DEFAULT '''' REFERENCES workspace (id)')
WHERE type = 'table' AND name = 'job';
UPDATE sqlite_master
SET sql = replace(sql, 'slug        TEXT NOT NULL UNIQUE',
                       'slug        TEXT NOT NULL DEFAULT '''' UNIQUE')
WHERE type = 'table' AND name = 'workspace';
PRAGMA writable_schema = RESET;

-- The agent's workspace (an unknown agent leaves NULL: the NOT NULL check refuses it).
CREATE TRIGGER job_old_writer_workspace AFTER INSERT ON job
WHEN NEW.workspace_id = ''
BEGIN
    UPDATE job
    SET workspace_id = (SELECT a.workspace_id FROM job_agent AS a WHERE a.id = NEW.job_agent_id)
    WHERE id = NEW.id;
END;

-- A slug of ctrlplane's pattern: the lowercased name with " ", "_" and "." as "-" when that is
-- one and free; a taken one gets "-" and 8 characters of the id, as the store does; any other
-- name gives "workspace-" and 8 characters of the id. (No regular expressions in SQLite.)
CREATE TRIGGER workspace_old_writer_slug AFTER INSERT ON workspace
WHEN NEW.slug = ''
BEGIN
    UPDATE workspace
    SET slug = (
        SELECT CASE
            WHEN length(c.slug) NOT BETWEEN 3 AND 50 OR c.slug GLOB '*[^a-z0-9-]*'
                THEN 'workspace-' || substr(NEW.id, 1, 8)
            WHEN EXISTS (SELECT 1 FROM workspace AS w WHERE w.slug = c.slug)
                THEN trim(substr(c.slug, 1, 41), '-') || '-' || substr(NEW.id, 1, 8)
            ELSE c.slug
        END
        FROM (SELECT trim(replace(replace(replace(lower(NEW.name), ' ', '-'), '_', '-'), '.', '-'),
                          '-') AS slug) AS c
    )
    WHERE id = NEW.id;
END;
