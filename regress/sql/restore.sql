-- A superuser's restore of a dump (pg_restore, or psql with pg_dump's
-- script) loads eventhub's tables the way pg_dump writes them: COPY ... FROM
-- stdin, with row_security off.  The write guard lets exactly that through:
-- anything else stays refused, to superusers too, and a non-superuser never
-- passes.
CREATE EXTENSION eventhub;

-- What pg_dump writes, as a superuser runs it.
SET row_security = off;
COPY eventhub.organization_states (organization_id, version_id, revision, updated_at) FROM stdin;
acme	11111111-1111-1111-1111-111111111112	2	2026-01-01 00:00:02+00
empty	33333333-3333-3333-3333-333333333333	0	2026-01-01 00:00:00+00
\.
COPY eventhub.events (organization_id, revision, version_id, processed_timestamp, originated_timestamp, event_type, action, entity_id, correlation_id, event_data) FROM stdin;
acme	1	11111111-1111-1111-1111-111111111111	2026-01-01 00:00:01+00	2026-01-01 00:00:01+00	API	CREATE	a1	c1	{"name": "a"}
acme	2	11111111-1111-1111-1111-111111111112	2026-01-01 00:00:02+00	2026-01-01 00:00:02+00	API	UPDATE	a1	c2	{"name": "b"}
\.
RESET row_security;

-- Consumers and publishers go on from the restored history.
SELECT revision, version_id, correlation_id FROM eventhub.events_since('acme', 0, 10, NULL);
SELECT eventhub.publish_event('acme', 'API', 'UPDATE', 'a1', 'c3', '{"name": "c"}');
SELECT revision, correlation_id FROM eventhub.events_since('acme', 2, 10, '11111111-1111-1111-1111-111111111112');
SELECT eventhub.publish_event('empty', 'API', 'CREATE', 'e1', 'c1', '{}');

-- Outside a restore a superuser is stopped as before: a COPY in an ordinary
-- session (row_security on) ...
COPY eventhub.events (organization_id, revision, version_id, processed_timestamp, originated_timestamp, event_type, action, entity_id, correlation_id, event_data) FROM stdin;
acme	9	11111111-1111-1111-1111-111111111119	2026-01-01 00:00:09+00	2026-01-01 00:00:09+00	API	UPDATE	a1	c9	{}
\.
-- ... and INSERT, UPDATE, DELETE or TRUNCATE, row_security off or not.
SET row_security = off;
INSERT INTO eventhub.events SELECT organization_id, 9, version_id, processed_timestamp, originated_timestamp,
       event_type, action, entity_id, 'c9', event_data FROM eventhub.events WHERE revision = 1;
UPDATE eventhub.organization_states SET revision = 9;
DELETE FROM eventhub.events;
TRUNCATE eventhub.events;

-- A COPY into another table does not open eventhub's: a trigger there that
-- writes eventhub.events is refused, the superuser's restore around it or not.
CREATE TABLE restored_elsewhere (id int);
CREATE FUNCTION write_events() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO eventhub.events SELECT organization_id, 10, version_id, processed_timestamp, originated_timestamp,
           event_type, action, entity_id, 'c10', event_data FROM eventhub.events WHERE revision = 1;
    RETURN NEW;
END $$;
CREATE TRIGGER write_events BEFORE INSERT ON restored_elsewhere FOR EACH ROW EXECUTE FUNCTION write_events();
COPY restored_elsewhere FROM stdin;
1
\.

-- A role that is not a superuser never passes, even with the table
-- privilege, BYPASSRLS and row_security off.
CREATE ROLE restore_bypass BYPASSRLS;
GRANT USAGE ON SCHEMA eventhub TO restore_bypass;
GRANT INSERT ON eventhub.events TO restore_bypass;
SET ROLE restore_bypass;
SET row_security = off;
COPY eventhub.events (organization_id, revision, version_id, processed_timestamp, originated_timestamp, event_type, action, entity_id, correlation_id, event_data) FROM stdin;
acme	9	11111111-1111-1111-1111-111111111119	2026-01-01 00:00:09+00	2026-01-01 00:00:09+00	API	UPDATE	a1	c9	{}
\.
RESET ROLE;

RESET row_security;
SELECT organization_id, revision FROM eventhub.events ORDER BY 1, 2;
SELECT organization_id, revision FROM eventhub.organization_states ORDER BY 1;

DROP TABLE restored_elsewhere;
DROP FUNCTION write_events();
REVOKE ALL ON eventhub.events FROM restore_bypass;
REVOKE ALL ON SCHEMA eventhub FROM restore_bypass;
DROP ROLE restore_bypass;
DROP EXTENSION eventhub;
