-- declare_full_state gives an organization whose events were removed
-- before 0.4.0 (complete_after NULL) the snapshot promise back;
-- snapshot_head gives the head a snapshot is read at.  (snapshot_entities
-- is still to come.)
CREATE EXTENSION eventhub;
SELECT eventhub.publish_event('acme', 'API', 'CREATE', 'a' || i, NULL, '{}') FROM generate_series(1, 3) i;
-- As the update to 0.4.0 leaves an organization that lost events.
SET eventhub.protect_tables = off;
UPDATE eventhub.organization_states SET complete_after = NULL WHERE organization_id = 'acme';
RESET eventhub.protect_tables;
-- Until the full state is declared, no snapshot.
SELECT * FROM eventhub.snapshot_head('acme');
\echo :LAST_ERROR_SQLSTATE

-- Refused: no revision, a negative one, one above the head (the update is
-- undone with the error).
SELECT eventhub.declare_full_state('acme', NULL);
SELECT eventhub.declare_full_state('acme', -1);
SELECT eventhub.declare_full_state('acme', 4);
\echo :LAST_ERROR_SQLSTATE
SELECT eventhub.declare_full_state(NULL, 0);
SELECT complete_after FROM eventhub.organization_states WHERE organization_id = 'acme';
-- An organization never published to has head 0.
SELECT eventhub.declare_full_state('nobody', 1);
SELECT eventhub.declare_full_state('nobody', 0);
SELECT count(*) AS registered FROM eventhub.organization_states WHERE organization_id = 'nobody';

-- At the head, and below it.
SELECT eventhub.declare_full_state('acme', 3);
SELECT complete_after FROM eventhub.organization_states WHERE organization_id = 'acme';
SELECT eventhub.declare_full_state('acme', 1);
SELECT complete_after FROM eventhub.organization_states WHERE organization_id = 'acme';
-- Publishing leaves it as declared.
SELECT eventhub.publish_event('acme', 'API', 'UPDATE', 'a1', NULL, '{}');
SELECT revision, complete_after FROM eventhub.organization_states WHERE organization_id = 'acme';

-- The head and its version; (0, NULL) for an organization never registered.
SELECT h.revision, h.version_id = s.version_id AS head_version
  FROM eventhub.snapshot_head('acme') h, eventhub.organization_states s WHERE s.organization_id = 'acme';
SELECT * FROM eventhub.snapshot_head('nobody');
SELECT * FROM eventhub.snapshot_head(NULL);

-- Privileges: EXECUTE alone is not enough, the publish grant for the
-- organization is needed, and is checked before the organization's
-- existence shows; the caller's search_path changes nothing.
CREATE ROLE regress_eh_declarer;
GRANT USAGE ON SCHEMA eventhub TO regress_eh_declarer;
GRANT EXECUTE ON FUNCTION eventhub.declare_full_state(text, bigint), eventhub.snapshot_head(text) TO regress_eh_declarer;
GRANT SELECT ON eventhub.organization_states TO regress_eh_declarer;
-- A first grant turns access control on.
SELECT eventhub.grant_organization('regress_eh_declarer', 'globex', 'publish');
SET ROLE regress_eh_declarer;
SELECT eventhub.declare_full_state('acme', 2);
SELECT eventhub.declare_full_state('nobody', 5);
\echo :LAST_ERROR_SQLSTATE
-- The publish grant does not give snapshots: they need read.
SELECT * FROM eventhub.snapshot_head('globex');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SELECT eventhub.grant_organization('regress_eh_declarer', 'acme', 'publish');
SET ROLE regress_eh_declarer;
CREATE TEMP TABLE organization_states (organization_id text, complete_after bigint, revision bigint);
SET search_path = pg_temp, public;
SELECT eventhub.declare_full_state('acme', 2);
SELECT eventhub.declare_full_state('globex', 1);
RESET ROLE;
SELECT eventhub.grant_organization('regress_eh_declarer', 'acme', 'read');
SET ROLE regress_eh_declarer;
-- With read, the superuser's rows show through row-level security.
SELECT revision FROM eventhub.snapshot_head('acme');
RESET search_path;
DROP TABLE pg_temp.organization_states;
RESET ROLE;
SELECT complete_after FROM eventhub.organization_states WHERE organization_id = 'acme';
SELECT eventhub.revoke_organization('regress_eh_declarer', 'acme', 'publish');
SELECT eventhub.revoke_organization('regress_eh_declarer', 'acme', 'read');
REVOKE ALL ON eventhub.organization_states FROM regress_eh_declarer;
SELECT eventhub.revoke_organization('regress_eh_declarer', 'globex', 'publish');
REVOKE ALL ON SCHEMA eventhub FROM regress_eh_declarer;
DROP EXTENSION eventhub;
DROP ROLE regress_eh_declarer;
