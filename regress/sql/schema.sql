-- The installed objects, their comments and privileges, and a clean uninstall.
CREATE EXTENSION eventhub;

SELECT extname, extversion, extrelocatable, extnamespace::regnamespace
  FROM pg_extension WHERE extname = 'eventhub';

\dx+ eventhub
\d eventhub.organization_states
\d eventhub.events

-- Every table, view, column and function of the extension has a comment.
SELECT c.oid::regclass AS uncommented_relation
  FROM pg_class c
 WHERE c.relnamespace = 'eventhub'::regnamespace AND c.relkind IN ('r', 'v')
   AND obj_description(c.oid, 'pg_class') IS NULL;
SELECT a.attrelid::regclass, a.attname AS uncommented_column
  FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
 WHERE c.relnamespace = 'eventhub'::regnamespace AND c.relkind IN ('r', 'v')
   AND a.attnum > 0 AND NOT a.attisdropped
   AND col_description(a.attrelid, a.attnum) IS NULL;
SELECT p.oid::regprocedure AS uncommented_function
  FROM pg_proc p
 WHERE p.pronamespace = 'eventhub'::regnamespace
   AND obj_description(p.oid, 'pg_proc') IS NULL;

-- Nothing is granted to PUBLIC: no function is executable and no table
-- readable without a GRANT.
SELECT p.oid::regprocedure AS public_function
  FROM pg_proc p
 WHERE p.pronamespace = 'eventhub'::regnamespace
   AND (p.proacl IS NULL
        OR EXISTS (SELECT FROM aclexplode(p.proacl) a WHERE a.grantee = 0));
SELECT c.oid::regclass AS public_relation
  FROM pg_class c
 WHERE c.relnamespace = 'eventhub'::regnamespace AND c.relkind IN ('r', 'v')
   AND EXISTS (SELECT FROM aclexplode(c.relacl) a WHERE a.grantee = 0);

-- Every function that runs SQL pins its search_path, except publish_event(_result)
-- and events_since, whose queries qualify every name (see security.sql); the
-- ones that write are SECURITY DEFINER.
SELECT p.oid::regprocedure AS function, p.prosecdef AS security_definer,
       p.provolatile AS volatility, p.proconfig
  FROM pg_proc p
 WHERE p.pronamespace = 'eventhub'::regnamespace
 ORDER BY p.oid::regprocedure::text;

-- Nothing is granted to PUBLIC but the two functions row-level security
-- policies call (above); every table has row-level security, the write
-- guard and nothing else as triggers.
SELECT c.oid::regclass AS relation, c.relrowsecurity AS rls,
       (SELECT string_agg(t.tgname || ' ' || t.tgenabled::text, ', ' ORDER BY t.tgname)
          FROM pg_trigger t WHERE t.tgrelid = c.oid AND NOT t.tgisinternal) AS triggers,
       (SELECT string_agg(p.polname || ' ' || p.polcmd::text, ', ' ORDER BY p.polname)
          FROM pg_policy p WHERE p.polrelid = c.oid) AS policies
  FROM pg_class c
 WHERE c.relnamespace = 'eventhub'::regnamespace AND c.relkind = 'r'
 ORDER BY c.relname;
SELECT evtname, evtevent, evttags, evtenabled, evtfoid::regproc
  FROM pg_event_trigger WHERE evtname LIKE 'eventhub%';

-- The data tables are dumped by pg_dump.
SELECT extconfig::regclass[] FROM pg_extension WHERE extname = 'eventhub';

-- event_type and entity_id compare byte by byte whatever the database's
-- collation ('B' < 'a', UTF-8 bytes after ASCII), and events_entity_idx
-- returns each entity's events in that order, revisions ascending, with
-- no sort.  A new organization's snapshot promise starts at 0 whichever
-- way it was created; publishing leaves it there.
SELECT eventhub.register_organization('registered') IS NOT NULL AS registered;
SELECT eventhub.publish_event('keys', t, 'CREATE', e, NULL, '{}')
  FROM (VALUES ('api', 'b'), ('API', 'a'), ('api', 'B'), ('API', 'é'), ('API', 'a'), ('api', 'a')) v(t, e);
SELECT organization_id, revision, complete_after FROM eventhub.organization_states ORDER BY 1;
CREATE FUNCTION pg_temp.plan_of(query text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    line text;
    plan text := '';
BEGIN
    FOR line IN EXECUTE 'EXPLAIN (COSTS OFF) ' || query LOOP
        plan := plan || line || ' ';
    END LOOP;
    RETURN plan;
END
$$;
SET enable_seqscan = off;
SET enable_bitmapscan = off;
SELECT plan LIKE '%events_entity_idx%' AS uses_entity_index, plan NOT LIKE '%Sort%' AS without_sort
  FROM pg_temp.plan_of($$SELECT event_type, entity_id, revision FROM eventhub.events
                        WHERE organization_id = 'keys' ORDER BY event_type, entity_id, revision$$) plan;
RESET enable_seqscan;
RESET enable_bitmapscan;
SELECT event_type, entity_id, revision FROM eventhub.events
 WHERE organization_id = 'keys' ORDER BY event_type, entity_id, revision;

-- Uninstalling leaves nothing behind.
SELECT eventhub.publish_event('acme', 'API', 'CREATE', 'api-1', NULL, '{}');
DROP EXTENSION eventhub;
SELECT count(*) AS leftover_schemas FROM pg_namespace WHERE nspname = 'eventhub';

-- Reinstalling in the same session works: cached plans follow the new tables.
CREATE EXTENSION eventhub;
SELECT eventhub.publish_event('acme', 'API', 'CREATE', 'api-1', NULL, '{}');
DROP EXTENSION eventhub;
