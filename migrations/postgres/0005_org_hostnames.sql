-- Hostname ownership: the patterns (exact names or "*." wildcards) each
-- organization owns. Tokens, binds, maintenance and scaling records of an
-- organization must lie inside its patterns, and no two organizations'
-- patterns overlap. The store checks overlap (a wildcard covering another
-- organization's name) before writing, with the table locked against other
-- writers; the primary key refuses the same pattern twice whatever the
-- writer.
--
-- Conventions as in 0001.

-- +goose Up
CREATE TABLE org_hostnames (
    pattern text PRIMARY KEY,
    org_id  text NOT NULL REFERENCES orgs (id)
);

-- Reading and replacing one organization's set.
CREATE INDEX org_hostnames_org_id ON org_hostnames (org_id);
