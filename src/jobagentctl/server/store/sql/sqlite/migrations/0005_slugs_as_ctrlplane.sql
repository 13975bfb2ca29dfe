-- jobagentctl schema v5 (SQLite): workspace slugs follow ctrlplane's rule (its
-- Workspace.slug: ^[a-z0-9-]+$, 3 to 50 characters), which the CLI and the server now hold
-- every slug to. v2 derived slugs as short as 1 character and `--slug` accepted "." and "_"
-- (its only characters outside [a-z0-9-]): such a slug becomes "." and "_" replaced by "-",
-- then "-" and the first 8 characters of the workspace id (unique as the ids are).
UPDATE workspace
SET slug = substr(replace(replace(slug, '.', '-'), '_', '-'), 1, 41) || '-' || substr(id, 1, 8)
WHERE length(slug) < 3 OR length(slug) > 50 OR slug GLOB '*[^a-z0-9-]*';
