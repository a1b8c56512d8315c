-- ALTER EXTENSION eventhub UPDATE from the previous releases (0.4.0, 0.3.0
-- and 0.2.0 through them), each created with CREATE EXTENSION ... VERSION,
-- which PostgreSQL reaches from the only earlier install script kept
-- (0.1.0's) through the update scripts: the library refuses the database
-- until it has run,
-- and afterwards the catalog is the one a fresh installation has,
-- privileges and comments included.  (regress/t/017_upgrade.pl goes from
-- 0.1.0 under load.)

-- Every object of the extension, one line each, with what defines it
-- (checked when called: the schema does not exist yet).
SET check_function_bodies = off;
CREATE FUNCTION pg_temp.eventhub_catalog() RETURNS SETOF text LANGUAGE sql AS $$
SELECT 'member ' || pg_describe_object(d.classid, d.objid, d.objsubid)
  FROM pg_depend d JOIN pg_extension x ON x.oid = d.refobjid
 WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e' AND x.extname = 'eventhub'
UNION ALL
SELECT format('function %s returns %s volatile=%s strict=%s secdef=%s parallel=%s rows=%s config=%s symbol=%s args=%s acl=%s comment=%s',
              p.oid::regprocedure, pg_get_function_result(p.oid), p.provolatile, p.proisstrict, p.prosecdef,
              p.proparallel, p.prorows, p.proconfig, p.prosrc, pg_get_function_arguments(p.oid), p.proacl,
              obj_description(p.oid, 'pg_proc'))
  FROM pg_proc p WHERE p.pronamespace = 'eventhub'::regnamespace
UNION ALL
SELECT format('relation %s kind=%s options=%s rls=%s acl=%s comment=%s', c.oid::regclass, c.relkind,
              c.reloptions, c.relrowsecurity, c.relacl, obj_description(c.oid, 'pg_class'))
  FROM pg_class c WHERE c.relnamespace = 'eventhub'::regnamespace
UNION ALL
SELECT format('column %s.%s %s notnull=%s collation=%s missing=%s default=%s acl=%s comment=%s', a.attrelid::regclass,
              a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull, a.attcollation, a.atthasmissing,
              pg_get_expr(ad.adbin, ad.adrelid), a.attacl, col_description(a.attrelid, a.attnum))
  FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
  LEFT JOIN pg_attrdef ad ON ad.adrelid = a.attrelid AND ad.adnum = a.attnum
 WHERE c.relnamespace = 'eventhub'::regnamespace AND a.attnum > 0 AND NOT a.attisdropped
UNION ALL
SELECT format('constraint %s on %s: %s', n.conname, n.conrelid::regclass, pg_get_constraintdef(n.oid))
  FROM pg_constraint n WHERE n.connamespace = 'eventhub'::regnamespace
UNION ALL
SELECT 'index ' || pg_get_indexdef(i.indexrelid)
  FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relnamespace = 'eventhub'::regnamespace
UNION ALL
SELECT format('trigger %s enabled=%s comment=%s', pg_get_triggerdef(t.oid), t.tgenabled, obj_description(t.oid, 'pg_trigger'))
  FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
 WHERE c.relnamespace = 'eventhub'::regnamespace AND NOT t.tgisinternal
UNION ALL
SELECT format('policy %s on %s: %s to %s using %s check %s comment=%s', o.polname, o.polrelid::regclass, o.polcmd,
              o.polroles::regrole[], pg_get_expr(o.polqual, o.polrelid), pg_get_expr(o.polwithcheck, o.polrelid),
              obj_description(o.oid, 'pg_policy'))
  FROM pg_policy o JOIN pg_class c ON c.oid = o.polrelid WHERE c.relnamespace = 'eventhub'::regnamespace
UNION ALL
SELECT format('view %s: %s', c.oid::regclass, pg_get_viewdef(c.oid))
  FROM pg_class c WHERE c.relnamespace = 'eventhub'::regnamespace AND c.relkind = 'v'
UNION ALL
SELECT format('event trigger %s on %s tags %s function %s enabled=%s comment=%s', e.evtname, e.evtevent, e.evttags,
              e.evtfoid::regproc, e.evtenabled, obj_description(e.oid, 'pg_event_trigger'))
  FROM pg_event_trigger e
UNION ALL
SELECT format('schema acl=%s comment=%s', s.nspacl, obj_description(s.oid, 'pg_namespace'))
  FROM pg_namespace s WHERE s.nspname = 'eventhub'
UNION ALL
SELECT format('initial privileges of %s: %s', pg_describe_object(i.classoid, i.objoid, i.objsubid), i.initprivs)
  FROM pg_init_privs i JOIN pg_depend d ON d.classid = i.classoid AND d.objid = i.objoid AND d.objsubid = 0
  JOIN pg_extension x ON x.oid = d.refobjid
 WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e' AND x.extname = 'eventhub' AND i.privtype = 'e'
UNION ALL
SELECT format('extension config %s condition %s', x.extconfig::regclass[], x.extcondition)
  FROM pg_extension x WHERE x.extname = 'eventhub'
$$;
RESET check_function_bodies;

CREATE EXTENSION eventhub VERSION '0.2.0';
-- The new library refuses the old objects, with what to do.
SELECT eventhub.publish_event('acme', 'API', 'CREATE', 'a1', 'c1', '{}');
ALTER EXTENSION eventhub UPDATE;
SELECT extversion FROM pg_extension WHERE extname = 'eventhub';
SELECT eventhub.publish_event('acme', 'API', 'CREATE', 'a1', 'c1', '{}');
CREATE TEMP TABLE updated_from_020 AS SELECT * FROM pg_temp.eventhub_catalog() AS c(line);
DROP EXTENSION eventhub;

-- From 0.3.0, with events written as 0.3.0 left them (this library refuses
-- to publish into 0.3.0's objects, hence the guard off): "whole" holds
-- every event up to its head, "cut" lost revisions 1 and 2 to retention,
-- "gap" lost revision 2 only, "empty" never published.
CREATE EXTENSION eventhub VERSION '0.3.0';
-- Refused as well.
SELECT eventhub.publish_event('acme', 'API', 'CREATE', 'a1', 'c1', '{}');
SET eventhub.protect_tables = off;
INSERT INTO eventhub.organization_states (organization_id, version_id, revision, updated_at)
SELECT o, gen_random_uuid(), h, now() FROM (VALUES ('whole', 2), ('cut', 3), ('gap', 3), ('empty', 0)) v(o, h);
INSERT INTO eventhub.events (organization_id, revision, version_id, processed_timestamp, originated_timestamp,
                             event_type, action, entity_id, correlation_id, event_data)
SELECT o, r, gen_random_uuid(), now(), now(), 'API', 'CREATE', 'a' || r, 'c' || r, '{}'
  FROM (VALUES ('whole', 1), ('whole', 2), ('cut', 3), ('gap', 1), ('gap', 3)) v(o, r);
UPDATE eventhub.organization_states s SET version_id = e.version_id
  FROM eventhub.events e WHERE e.organization_id = s.organization_id AND e.revision = s.revision;
RESET eventhub.protect_tables;
CREATE TEMP TABLE files_before AS
SELECT pg_relation_filenode('eventhub.events') AS events, pg_relation_filenode('eventhub.organization_states') AS states;
-- A warning counts the organizations that lost events.
ALTER EXTENSION eventhub UPDATE;
SELECT extversion FROM pg_extension WHERE extname = 'eventhub';
-- Neither table was rewritten: the collation change and the new columns
-- only changed the catalog.
SELECT pg_relation_filenode('eventhub.events') = events AS events_kept,
       pg_relation_filenode('eventhub.organization_states') = states AS states_kept
  FROM files_before;
-- complete_after is NULL exactly where events were removed; every event
-- from before the update has no transaction_first_revision.
SELECT organization_id, revision, complete_after FROM eventhub.organization_states ORDER BY 1;
SELECT count(*) AS events, count(transaction_first_revision) AS with_first_revision FROM eventhub.events;
SELECT attname, collname FROM pg_attribute a JOIN pg_collation c ON c.oid = a.attcollation
 WHERE a.attrelid = 'eventhub.events'::regclass AND attname IN ('event_type', 'entity_id') ORDER BY 1;
-- The old events read through events_since, with the new column at the end;
-- publishing goes on, and a new organization starts complete.
SELECT revision, event_type, entity_id, transaction_first_revision FROM eventhub.events_since('whole', 0);
SELECT eventhub.publish_event('whole', 'API', 'UPDATE', 'a1', 'c3', '{}');
SELECT eventhub.publish_event('new', 'API', 'CREATE', 'a1', 'c1', '{}');
SELECT organization_id, revision, complete_after FROM eventhub.organization_states
 WHERE organization_id IN ('whole', 'new') ORDER BY 1;
CREATE TEMP TABLE updated_from_030 AS SELECT * FROM pg_temp.eventhub_catalog() AS c(line);
DROP EXTENSION eventhub;

-- From 0.4.0: refused until the update, which adds eventhub.metrics() and
-- keeps what was published.
CREATE EXTENSION eventhub VERSION '0.4.0';
SELECT eventhub.publish_event('acme', 'API', 'CREATE', 'a1', 'c1', '{}');
SET eventhub.protect_tables = off;
INSERT INTO eventhub.organization_states (organization_id, version_id, revision, updated_at)
VALUES ('acme', gen_random_uuid(), 0, now()), ('beta', gen_random_uuid(), 2, now());
-- Progress carried over: r-a and r-b disagree at beta's head, r-c is
-- behind it.
INSERT INTO eventhub.replicas (replica_id, started_at, last_heartbeat, owner)
SELECT r, now(), now(), current_user::regrole FROM unnest(ARRAY['r-a', 'r-b', 'r-c']) r;
INSERT INTO eventhub.replica_progress (replica_id, organization_id, applied_revision, applied_at, config_hash)
VALUES ('r-a', 'beta', 2, now(), 'h'), ('r-b', 'beta', 2, now(), 'k'), ('r-c', 'beta', 1, now(), 'h');
RESET eventhub.protect_tables;
ALTER EXTENSION eventhub UPDATE;
SELECT extversion FROM pg_extension WHERE extname = 'eventhub';
SELECT eventhub.publish_event('acme', 'API', 'CREATE', 'a1', 'c1', '{}');
SELECT count(*) > 0 AS series FROM eventhub.metrics();
-- The update records the head of the rows behind it (the others get it at
-- their next heartbeat) and the pairs where hashes differ: metrics() sees
-- both at once.
SELECT replica_id, applied_revision, head_revision FROM eventhub.replica_progress ORDER BY 1;
SELECT organization_id, revision FROM eventhub.config_splits;
SELECT name, labels->>'replica' AS replica, value FROM eventhub.metrics()
 WHERE name IN ('eventhub_replica_lag_events', 'eventhub_replica_config_hash_mismatch') ORDER BY 1, 2;
CREATE TEMP TABLE updated_from_040 AS SELECT * FROM pg_temp.eventhub_catalog() AS c(line);
DROP EXTENSION eventhub;

CREATE EXTENSION eventhub;
CREATE TEMP TABLE fresh AS SELECT * FROM pg_temp.eventhub_catalog() AS c(line);
DROP EXTENSION eventhub;

-- Nothing differs, from either release.
SELECT 'only after the update from 0.2.0' AS "where", line FROM (TABLE updated_from_020 EXCEPT ALL TABLE fresh) u
UNION ALL
SELECT 'only in a fresh installation, not from 0.2.0', line FROM (TABLE fresh EXCEPT ALL TABLE updated_from_020) f
UNION ALL
SELECT 'only after the update from 0.3.0', line FROM (TABLE updated_from_030 EXCEPT ALL TABLE fresh) u
UNION ALL
SELECT 'only in a fresh installation, not from 0.3.0', line FROM (TABLE fresh EXCEPT ALL TABLE updated_from_030) f
UNION ALL
SELECT 'only after the update from 0.4.0', line FROM (TABLE updated_from_040 EXCEPT ALL TABLE fresh) u
UNION ALL
SELECT 'only in a fresh installation, not from 0.4.0', line FROM (TABLE fresh EXCEPT ALL TABLE updated_from_040) f
ORDER BY 1, 2;
-- And the comparison saw the objects: functions, tables, triggers, grants,
-- initial privileges, and the new columns and index.
SELECT count(*) FILTER (WHERE line LIKE 'function %') AS functions,
       count(*) FILTER (WHERE line LIKE 'relation %' AND line LIKE '% kind=r %') AS tables,
       count(*) FILTER (WHERE line LIKE 'trigger %') AS triggers,
       count(*) FILTER (WHERE line LIKE 'initial privileges %') AS initial_privileges,
       count(*) FILTER (WHERE line LIKE 'column eventhub.events.transaction_first_revision %'
                           OR line LIKE 'column eventhub.organization_states.complete_after %'
                           OR line LIKE 'index CREATE INDEX events_entity_idx %'
                           OR line LIKE 'function eventhub.transactions_since(%'
                           OR line = 'member type eventhub.transaction_event'
                           OR line LIKE 'function eventhub.metrics()%'
                           OR line LIKE 'function eventhub.statements()%'
                           OR line LIKE 'column eventhub.replica_progress.head_revision %'
                           OR line LIKE 'index CREATE INDEX replica_progress_behind_idx %'
                           OR line LIKE 'relation eventhub.config_splits %') AS new_objects
  FROM fresh;
