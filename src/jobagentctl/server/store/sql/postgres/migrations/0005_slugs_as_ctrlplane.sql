-- jobagentctl schema v5 (PostgreSQL): workspace slugs follow ctrlplane's rule (its
-- Workspace.slug: ^[a-z0-9-]+$, 3 to 50 characters), which the CLI and the server now hold
-- every slug to. v2 derived slugs as short as 1 character and `--slug` accepted "." and "_":
-- such a slug becomes its characters outside [a-z0-9-] replaced by "-", then "-" and the
-- first 8 characters of the workspace id (unique as the ids are; 10 to 50 characters).
UPDATE workspace
SET slug = left(regexp_replace(slug, '[^a-z0-9-]+', '-', 'g'), 41) || '-' || left(id::text, 8)
WHERE slug !~ '^[a-z0-9-]{3,50}$';
