-- declare_full_state gives an organization whose events were removed
-- before 0.4.0 (complete_after NULL) the snapshot promise back;
-- snapshot_head gives the head a snapshot is read at; snapshot_entities
-- gives its pages.
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
-- An organization registered without events: revision 0 with the version
-- register_organization returned, not NULL.  Its snapshot has no entities,
-- and that head is a cursor: nothing follows it, and its version is
-- checked like any other (ZE005 for another one).
SELECT eventhub.register_organization('registered') AS registered_version \gset
SELECT revision, version_id IS NOT NULL AS has_version, version_id = :'registered_version' AS registered_version
  FROM eventhub.snapshot_head('registered');
SELECT count(*) AS entities FROM eventhub.snapshot_entities('registered', 0, at_version => :'registered_version');
SELECT count(*) AS events FROM eventhub.transactions_since('registered', 0, 1000, :'registered_version');
SELECT count(*) FROM eventhub.snapshot_entities('registered', 0, at_version => gen_random_uuid());
\echo :LAST_ERROR_SQLSTATE
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

-- snapshot_entities: each live entity's latest event, in byte order of
-- (event_type, entity_id): 'B' < 'a', a shared prefix before the longer
-- id, UTF-8 after ASCII.  A tombstone leaves its entity out; a CREATE after
-- it brings the entity back.
CREATE EXTENSION eventhub;
SELECT count(eventhub.publish_event('shop', t, a, e, NULL, jsonb_build_object('n', n)))
  FROM (VALUES (1, 'API', 'CREATE', 'a'), (2, 'API', 'CREATE', 'ab'), (3, 'API', 'CREATE', 'B'),
               (4, 'API', 'UPDATE', 'a'), (5, 'API', 'CREATE', 'é'), (6, 'CERT', 'CREATE', 'x'),
               (7, 'API', 'DELETE', 'ab'), (8, 'CERT', 'DELETE', 'x'), (9, 'CERT', 'CREATE', 'x'),
               (10, 'api', 'CREATE', 'a'), (11, 'API', 'CREATE', 'gone'), (12, 'API', 'DELETE', 'gone')) v(n, t, a, e);
SELECT revision, version_id IS NOT NULL AS has_version FROM eventhub.snapshot_head('shop');
SELECT event_type, entity_id, revision, action, event_data FROM eventhub.snapshot_entities('shop', 12);
-- Pages of 2, each after the last row of the one before; the last is short.
SELECT event_type, entity_id, revision FROM eventhub.snapshot_entities('shop', 12, max_entities => 2);
SELECT event_type, entity_id, revision FROM eventhub.snapshot_entities('shop', 12, 'API', 'a', 2);
SELECT event_type, entity_id, revision FROM eventhub.snapshot_entities('shop', 12, 'API', 'é', 2);
SELECT event_type, entity_id, revision FROM eventhub.snapshot_entities('shop', 12, 'api', 'a', 2);
-- max_bytes: a page is full once its rows reach it, and holds one row at least.
SELECT count(*) FROM eventhub.snapshot_entities('shop', 12, max_bytes => 1);
SELECT count(*) FROM eventhub.snapshot_entities('shop', 12, max_bytes => 400);
-- An event stored out of line (TOAST) counts its stored size, not its
-- pointer's: with a budget above two small rows, the big one fills the
-- page alone.
SELECT eventhub.publish_event('toasty', 'API', 'CREATE', 'big', NULL,
                              jsonb_build_object('pad', (SELECT string_agg(md5(i::text), '') FROM generate_series(1, 300) i)));
SELECT eventhub.publish_event('toasty', 'API', 'CREATE', 'small', NULL, '{}');
SELECT pg_column_size(event_data) > 2000 AS stored_big FROM eventhub.events WHERE organization_id = 'toasty' AND revision = 1;
SELECT entity_id FROM eventhub.snapshot_entities('toasty', 2, max_bytes => 1000);

-- The last page, as docs/protocol.md and docs/sql.md give the rule: a page
-- with no rows ends the snapshot; without max_bytes, so does a page with
-- fewer rows than max_entities; with max_bytes a short page is no sign
-- (the server counts stored bytes), so a reader reads on until a page has
-- no rows.  Organization "pages": 30 entities of three types, of three
-- sizes (a small object, 256 characters, and 5,000 that are stored
-- compressed), then superseded events and tombstones: 27 live entities.
SELECT count(eventhub.publish_event('pages', t, 'CREATE', t || '-' || i, NULL,
         CASE WHEN i % 4 = 0 THEN jsonb_build_object('pad', repeat(md5(t || i), 8))
              WHEN i % 7 = 0 THEN jsonb_build_object('pad', repeat('x', 5000))
              ELSE jsonb_build_object('n', i) END))
  FROM unnest(ARRAY['API', 'CERT', 'ROUTE']) t, generate_series(1, 10) i;
SELECT count(eventhub.publish_event('pages', t, a, e, NULL, '{"again": true}'))
  FROM (VALUES ('API', 'UPDATE', 'API-1'), ('API', 'UPDATE', 'API-3'), ('CERT', 'DELETE', 'CERT-2'),
               ('CERT', 'UPDATE', 'CERT-7'), ('ROUTE', 'DELETE', 'ROUTE-9'), ('ROUTE', 'DELETE', 'ROUTE-10'))
       v(t, a, e);
SELECT count(*) FILTER (WHERE pg_column_size(event_data) < length(event_data::text)) AS stored_compressed
  FROM eventhub.events WHERE organization_id = 'pages';
-- A reader that follows the rule, in one REPEATABLE READ transaction (not
-- READ ONLY here: it keeps what it read in a temporary table): the rows of
-- each page it read, then whether it got every live entity (as the events
-- table says) exactly once.
CREATE TEMP TABLE snapshot_read (page integer, event_type text COLLATE "C", entity_id text COLLATE "C");
CREATE FUNCTION pg_temp.read_snapshot(org text, max_entities integer, max_bytes integer DEFAULT NULL)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    h record;
    after_type text;
    after_id text;
    n integer;
    sizes text[] := '{}';
    live_rows bigint;
    read_rows bigint;
    read_entities bigint;
    missing bigint;
    extra bigint;
BEGIN
    DELETE FROM snapshot_read;
    SELECT * INTO h FROM eventhub.snapshot_head(org);
    FOR p IN 1 .. 100 LOOP
        INSERT INTO snapshot_read
        SELECT p, s.event_type, s.entity_id
          FROM eventhub.snapshot_entities(org, h.revision, after_type, after_id, max_entities, max_bytes,
                                          h.version_id) s;
        GET DIAGNOSTICS n = ROW_COUNT;
        sizes := sizes || n::text;
        EXIT WHEN n = 0 OR (max_bytes IS NULL AND n < max_entities);
        SELECT r.event_type, r.entity_id INTO after_type, after_id
          FROM snapshot_read r WHERE r.page = p ORDER BY r.event_type DESC, r.entity_id DESC LIMIT 1;
    END LOOP;
    IF NOT (n = 0 OR (max_bytes IS NULL AND n < max_entities)) THEN
        RAISE EXCEPTION 'the snapshot of % did not end in 100 pages', org;
    END IF;
    WITH latest AS (
        SELECT DISTINCT ON (e.event_type, e.entity_id) e.event_type, e.entity_id, e.action
          FROM eventhub.events e WHERE e.organization_id = org
         ORDER BY e.event_type, e.entity_id, e.revision DESC),
    live AS (SELECT l.event_type, l.entity_id FROM latest l WHERE l.action <> 'DELETE')
    SELECT (SELECT count(*) FROM live),
           (SELECT count(*) FROM snapshot_read),
           (SELECT count(DISTINCT (r.event_type, r.entity_id)) FROM snapshot_read r),
           (SELECT count(*) FROM (SELECT * FROM live EXCEPT SELECT r.event_type, r.entity_id FROM snapshot_read r) x),
           (SELECT count(*) FROM (SELECT r.event_type, r.entity_id FROM snapshot_read r EXCEPT SELECT * FROM live) x)
      INTO live_rows, read_rows, read_entities, missing, extra;
    RETURN format('pages %s: %s rows, %s entities of %s live, %s missing, %s extra',
                  array_to_string(sizes, ','), read_rows, read_entities, live_rows, missing, extra);
END
$$;
-- By count: pages of 5 end with a short one; pages of 9 hold the 27
-- exactly, so the last full page is followed by an empty one.  By size:
-- short pages come before the end, which only the empty page tells; with
-- both limits, pages are cut by either.
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT m.max_entities, m.max_bytes, pg_temp.read_snapshot('pages', m.max_entities, m.max_bytes) AS reader
  FROM (VALUES (5, NULL), (9, NULL), (27, NULL), (1000, 1000), (4, 800), (1, 1)) m(max_entities, max_bytes)
 ORDER BY m.max_entities, m.max_bytes;
COMMIT;
-- The head checks: another revision or version is ZE005.
SELECT count(*) FROM eventhub.snapshot_entities('shop', 11);
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) FROM eventhub.snapshot_entities('shop', 12, at_version => (SELECT version_id FROM eventhub.snapshot_head('shop')));
SELECT count(*) FROM eventhub.snapshot_entities('shop', 12, at_version => gen_random_uuid());
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) FROM eventhub.snapshot_entities('nobody', 0);
-- Bad arguments.
SELECT * FROM eventhub.snapshot_entities('shop', 12, 'API', NULL);
SELECT * FROM eventhub.snapshot_entities('shop', 12, max_entities => 0);
SELECT * FROM eventhub.snapshot_entities('shop', 12, max_bytes => 0);
SELECT * FROM eventhub.snapshot_entities('shop', NULL);
-- complete_after N: only events above N count.
SET eventhub.protect_tables = off;
UPDATE eventhub.organization_states SET complete_after = 9 WHERE organization_id = 'shop';
SELECT event_type, entity_id, revision FROM eventhub.snapshot_entities('shop', 12);
UPDATE eventhub.organization_states SET complete_after = NULL WHERE organization_id = 'shop';
RESET eventhub.protect_tables;
SELECT * FROM eventhub.snapshot_entities('shop', 12);
\echo :LAST_ERROR_SQLSTATE
-- Under access control the caller needs read, checked before anything is
-- read; with it, the superuser's rows show through row-level security.
SELECT eventhub.declare_full_state('shop', 0);
CREATE ROLE regress_eh_snapshot;
GRANT USAGE ON SCHEMA eventhub TO regress_eh_snapshot;
GRANT SELECT ON eventhub.events, eventhub.organization_states TO regress_eh_snapshot;
GRANT EXECUTE ON FUNCTION eventhub.snapshot_entities(text, bigint, text, text, integer, integer, uuid) TO regress_eh_snapshot;
SELECT eventhub.grant_organization('regress_eh_snapshot', 'other', 'read');
SET ROLE regress_eh_snapshot;
SELECT count(*) FROM eventhub.snapshot_entities('shop', 12);
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SELECT eventhub.grant_organization('regress_eh_snapshot', 'shop', 'read');
SET ROLE regress_eh_snapshot;
SELECT count(*) FROM eventhub.snapshot_entities('shop', 12);
RESET ROLE;
DROP EXTENSION eventhub;
DROP ROLE regress_eh_snapshot;
