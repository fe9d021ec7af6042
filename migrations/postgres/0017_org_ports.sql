-- Port ownership (issue #38): the public port ranges each organization
-- owns, as hostnames are owned (0005). A token's allow_tcp_ports must lie
-- inside its organization's ranges, and a client may open only a port of
-- its organization's ranges (the default organization without ranges:
-- any port no other organization owns). No two organizations' ranges
-- overlap: the store checks before writing, with the table locked against
-- other writers; the primary key refuses the same first port twice
-- whatever the writer.
--
-- Conventions as in 0001.

-- +goose Up
CREATE TABLE org_ports (
    lo     integer PRIMARY KEY CHECK (lo BETWEEN 1 AND 65535),
    hi     integer NOT NULL CHECK (hi BETWEEN lo AND 65535),
    org_id text NOT NULL REFERENCES orgs (id)
);

-- Reading and replacing one organization's set.
CREATE INDEX org_ports_org_id ON org_ports (org_id);
