-- transactions_since: events_since's batches cut where a publishing
-- transaction ends, with each row's transaction_first_revision,
-- transaction_end and the head it was read at.
CREATE EXTENSION eventhub;

-- A batch as one line: each row as revision(transaction_first_revision),
-- "|" after a row that ends its transaction, then whether it is caught up
-- (empty, or its last row at head_revision).
CREATE FUNCTION pg_temp.batch(org text, after bigint, max_events integer, max_bytes integer DEFAULT NULL)
RETURNS text LANGUAGE sql AS $$
SELECT coalesce(string_agg(t.revision || '(' || t.transaction_first_revision || ')'
                           || CASE WHEN t.transaction_end THEN '|' ELSE '' END, ' ' ORDER BY t.revision), '')
       || CASE WHEN coalesce(max(t.revision) = max(t.head_revision), true) THEN '  caught up' ELSE '' END
  FROM eventhub.transactions_since(org, after, max_events, NULL, max_bytes) t
$$;
-- A reader following the protocol: from after, one line per batch, each
-- call from the last row of the one before, until caught up.
CREATE FUNCTION pg_temp.read_all(org text, after bigint, max_events integer, max_bytes integer DEFAULT NULL)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    cur bigint := after;
    line text;
    lines text[] := '{}';
    last_revision bigint;
    head bigint;
BEGIN
    FOR i IN 1 .. 100 LOOP
        line := pg_temp.batch(org, cur, max_events, max_bytes);
        lines := lines || line;
        SELECT max(t.revision), max(t.head_revision) INTO last_revision, head
          FROM eventhub.transactions_since(org, cur, max_events, NULL, max_bytes) t;
        EXIT WHEN last_revision IS NULL OR last_revision = head;
        cur := last_revision;
    END LOOP;
    RETURN array_to_string(lines, ' / ');
END
$$;

-- A transaction of 3 events (1-3), then one of 2 (4-5): every row of a
-- transaction names its first revision, the last one ends it.
BEGIN;
SELECT eventhub.publish_event('tx', 'API', 'CREATE', 'a' || i, 'c' || i, '{}') FROM generate_series(1, 3) i;
COMMIT;
BEGIN;
SELECT eventhub.publish_event('tx', 'API', 'CREATE', 'a' || i, 'c' || i, '{}') FROM generate_series(4, 5) i;
COMMIT;
SELECT organization_id, revision, action, entity_id, correlation_id, transaction_first_revision,
       transaction_end, head_revision
  FROM eventhub.transactions_since('tx', 0);
-- The other columns are the event's, as events_since returns them.
SELECT count(*) AS same_as_events_since
  FROM eventhub.transactions_since('tx', 0) t
  JOIN eventhub.events_since('tx', 0) e USING (organization_id, revision, version_id, processed_timestamp,
                                               originated_timestamp, event_type, action, entity_id,
                                               correlation_id, event_data, transaction_first_revision);

-- max_events 1 to 6, from 0 and from inside the first transaction: a batch
-- ends where a transaction does; below 3 the first transaction alone is
-- over the limit and comes in parts, the last without "|".
SELECT m AS max_events, pg_temp.batch('tx', 0, m) AS from_0, pg_temp.batch('tx', 1, m) AS from_1,
       pg_temp.batch('tx', 3, m) AS from_3
  FROM generate_series(1, 6) m;
-- Read through: every event exactly once, in order, each transaction whole
-- or in parts that follow each other.
SELECT m AS max_events, pg_temp.read_all('tx', 0, m) AS batches FROM generate_series(1, 6) m;

-- A row inside a split transaction is a cursor like any other: a reader
-- that calls again from the last row of each batch, with its version, gets
-- every event once, and the rest of the transaction first.  With batches
-- of 2, the first ends inside transaction 1-3 at revision 2; from (2, its
-- version) the next call returns 3, which ends the transaction; another
-- version at 2 is ZE003, as at any cursor.
CREATE FUNCTION pg_temp.read_all_versioned(org text, max_events integer)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    cur bigint := 0;
    ver uuid;
    line text;
    lines text[] := '{}';
    last_row record;
BEGIN
    FOR i IN 1 .. 100 LOOP
        SELECT coalesce(string_agg(t.revision || '(' || t.transaction_first_revision || ')'
                                   || CASE WHEN t.transaction_end THEN '|' ELSE '' END, ' ' ORDER BY t.revision), '')
          INTO line FROM eventhub.transactions_since(org, cur, max_events, ver) t;
        lines := lines || line;
        SELECT t.revision, t.version_id, t.head_revision INTO last_row
          FROM eventhub.transactions_since(org, cur, max_events, ver) t ORDER BY t.revision DESC LIMIT 1;
        EXIT WHEN last_row.revision IS NULL OR last_row.revision = last_row.head_revision;
        cur := last_row.revision;
        ver := last_row.version_id;
    END LOOP;
    RETURN array_to_string(lines, ' / ');
END
$$;
SELECT m AS max_events, pg_temp.read_all_versioned('tx', m) AS batches FROM generate_series(1, 3) m;
SELECT revision AS split_at, version_id AS split_version, transaction_end
  FROM eventhub.transactions_since('tx', 0, 2) ORDER BY revision DESC LIMIT 1 \gset
SELECT :split_at AS cursor, :'transaction_end' AS transaction_end;
SELECT revision, transaction_first_revision, transaction_end
  FROM eventhub.transactions_since('tx', :split_at, 2, :'split_version');
SELECT revision FROM eventhub.events_since('tx', :split_at, 10, :'split_version');
\set VERBOSITY terse
SELECT * FROM eventhub.transactions_since('tx', :split_at, 2, gen_random_uuid());
\echo :LAST_ERROR_SQLSTATE
\set VERBOSITY default

-- max_bytes counts stored size: event_type, entity_id, correlation_id and
-- event_data as stored, plus 160 per row.  These events are all the same
-- size; the row that reaches max_bytes is the batch's last (never none).
SELECT DISTINCT pg_column_size(event_type) + pg_column_size(entity_id) + pg_column_size(correlation_id)
                + pg_column_size(event_data) + 160 AS row_bytes
  FROM eventhub.events WHERE organization_id = 'tx' \gset
SELECT :row_bytes AS row_bytes;
SELECT b.label AS max_bytes, pg_temp.batch('tx', 0, 100, b.bytes) AS from_0
  FROM (VALUES ('1', 1), ('1 row', :row_bytes), ('2 rows', 2 * :row_bytes), ('3 rows - 1', 3 * :row_bytes - 1),
               ('3 rows', 3 * :row_bytes), ('3 rows + 1', 3 * :row_bytes + 1), ('4 rows', 4 * :row_bytes),
               ('5 rows', 5 * :row_bytes), ('6 rows', 6 * :row_bytes)) b(label, bytes);
SELECT pg_temp.read_all('tx', 0, 100, 2 * :row_bytes) AS two_rows_of_bytes;
-- A big event counts its size (about 1000 bytes more), second of the
-- first transaction: one small row's bytes split that transaction; 4 small
-- rows' bytes, or 1000, are reached at the big event, which ends the batch
-- with its transaction; 2000 bytes hold everything.
BEGIN;
SELECT eventhub.publish_event('tx-big', 'API', 'CREATE', 'small', 's1', '{}');
SELECT eventhub.publish_event('tx-big', 'API', 'CREATE', 'big', 's2', jsonb_build_object('pad', repeat('x', 1000)));
COMMIT;
SELECT eventhub.publish_event('tx-big', 'API', 'CREATE', 'small', 's3', '{}');
SELECT pg_column_size(event_data) > 1000 AS big FROM eventhub.events WHERE organization_id = 'tx-big' ORDER BY revision;
SELECT b AS max_bytes, pg_temp.read_all('tx-big', 0, 100, b) AS batches
  FROM unnest(ARRAY[:row_bytes, 4 * :row_bytes, 1000, 2000]) b;

-- An event stored out of line (TOAST) counts its stored size, not its
-- pointer's: the big one ends the batch of 2 small rows' bytes and 1000.
BEGIN;
SELECT eventhub.publish_event('tx-toast', 'API', 'CREATE', 'small', 't1', '{}');
SELECT eventhub.publish_event('tx-toast', 'API', 'CREATE', 'big', 't2',
                              jsonb_build_object('pad', (SELECT string_agg(md5(i::text), '') FROM generate_series(1, 300) i)));
COMMIT;
SELECT eventhub.publish_event('tx-toast', 'API', 'CREATE', 'small', 't3', '{}');
SELECT pg_column_size(event_data) > 2000 AS stored_big
  FROM eventhub.events WHERE organization_id = 'tx-toast' AND revision = 2;
SELECT pg_temp.read_all('tx-toast', 0, 100, 2 * :row_bytes + 1000) AS batches;

-- Caught up: a cut batch ends below the head, so the reader calls again at
-- once; the batch that reaches the head, or an empty one, is caught up.
SELECT revision, head_revision, revision = head_revision AS caught_up
  FROM eventhub.transactions_since('tx', 0, 4) ORDER BY revision DESC LIMIT 1;
SELECT revision, head_revision, revision = head_revision AS caught_up
  FROM eventhub.transactions_since('tx', 3, 4) ORDER BY revision DESC LIMIT 1;
SELECT count(*) AS at_the_head FROM eventhub.transactions_since('tx', 5);
SELECT count(*) AS never_published FROM eventhub.transactions_since('tx-nobody', 0);

-- Events published before 0.4.0 have no transaction_first_revision: each
-- is its own transaction.  (Written as 0.3.0 left them, hence the guard
-- off.)
SET eventhub.protect_tables = off;
INSERT INTO eventhub.organization_states (organization_id, version_id, revision, updated_at)
VALUES ('tx-old', gen_random_uuid(), 3, now());
INSERT INTO eventhub.events (organization_id, revision, version_id, processed_timestamp, originated_timestamp,
                             event_type, action, entity_id, correlation_id, event_data)
SELECT 'tx-old', r, gen_random_uuid(), now(), now(), 'API', 'CREATE', 'o' || r, 'o' || r, '{}'
  FROM generate_series(1, 3) r;
UPDATE eventhub.organization_states s SET version_id = e.version_id
  FROM eventhub.events e WHERE e.organization_id = s.organization_id AND e.revision = s.revision
   AND s.organization_id = 'tx-old';
RESET eventhub.protect_tables;
BEGIN;
SELECT eventhub.publish_event('tx-old', 'API', 'UPDATE', 'o' || i, 'n' || i, '{}') FROM generate_series(1, 2) i;
COMMIT;
SELECT revision, t.transaction_first_revision, t.transaction_end
  FROM eventhub.events e JOIN eventhub.transactions_since('tx-old', 0) t USING (organization_id, revision)
 WHERE e.transaction_first_revision IS NULL;
SELECT m AS max_events, pg_temp.read_all('tx-old', 0, m) AS batches FROM generate_series(1, 3) m;

-- A savepoint rolled back: its event is gone, and the transaction's first
-- event is its first surviving one.
BEGIN;
SAVEPOINT s;
SELECT eventhub.publish_event('tx-sp', 'API', 'CREATE', 'gone', 'sp-1', '{}');
ROLLBACK TO SAVEPOINT s;
SELECT eventhub.publish_event('tx-sp', 'API', 'CREATE', 'kept', 'sp-2', '{}');
SAVEPOINT t;
SELECT eventhub.publish_event('tx-sp', 'API', 'CREATE', 'gone', 'sp-3', '{}');
ROLLBACK TO SAVEPOINT t;
SELECT eventhub.publish_event('tx-sp', 'API', 'CREATE', 'kept', 'sp-4', '{}');
COMMIT;
SELECT eventhub.publish_event('tx-sp', 'API', 'CREATE', 'alone', 'sp-5', '{}');
SELECT revision, entity_id, correlation_id, transaction_first_revision, transaction_end
  FROM eventhub.transactions_since('tx-sp', 0);
SELECT pg_temp.read_all('tx-sp', 0, 1) AS one_at_a_time;

-- The cursor checks of events_since, the same SQLSTATEs.  ZE002: above
-- the head.
SELECT * FROM eventhub.transactions_since('tx', 6);
\echo :LAST_ERROR_SQLSTATE
-- ZE003: another history at the cursor (terse: the details name random
-- version ids); the right version reads on.
SELECT version_id AS v3 FROM eventhub.events WHERE organization_id = 'tx' AND revision = 3 \gset
SELECT revision FROM eventhub.transactions_since('tx', 3, 10, :'v3');
\set VERBOSITY terse
SELECT * FROM eventhub.transactions_since('tx', 3, 10, gen_random_uuid());
\echo :LAST_ERROR_SQLSTATE
\set VERBOSITY default
-- ZE001: events the reader has not read were removed (revision 4, the
-- second transaction's first), whether the batch starts at the hole or runs
-- into it; a batch that is full before the hole returns, cut where the
-- first transaction ends.
SET eventhub.protect_tables = off;
DELETE FROM eventhub.events WHERE organization_id = 'tx' AND revision = 4;
RESET eventhub.protect_tables;
SELECT * FROM eventhub.transactions_since('tx', 3);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM eventhub.transactions_since('tx', 0);
\echo :LAST_ERROR_SQLSTATE
SELECT pg_temp.batch('tx', 0, 3) AS full_before_the_hole;
SELECT pg_temp.batch('tx', 4, 3) AS after_the_hole;

-- Bad arguments, before anything is read.
SELECT * FROM eventhub.transactions_since(NULL, 0);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM eventhub.transactions_since('tx', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM eventhub.transactions_since('tx', 0, NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM eventhub.transactions_since('tx', -1);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM eventhub.transactions_since('tx', 0, 0);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM eventhub.transactions_since('tx', 0, 10, NULL, 0);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM eventhub.transactions_since('tx', 0, 10, NULL, -5);
\echo :LAST_ERROR_SQLSTATE

-- Privileges, as events_since: not executable by PUBLIC; under access
-- control a role reads only the organizations it may read, and is refused
-- the others alike whether they exist or not; row-level security applies.
CREATE ROLE regress_eh_tx_nobody;
CREATE ROLE regress_eh_tx_reader;
GRANT USAGE ON SCHEMA eventhub TO regress_eh_tx_nobody, regress_eh_tx_reader;
GRANT SELECT ON eventhub.organization_states, eventhub.events TO regress_eh_tx_reader;
GRANT EXECUTE ON FUNCTION eventhub.transactions_since(text, bigint, integer, uuid, integer) TO regress_eh_tx_reader;
SET ROLE regress_eh_tx_nobody;
SELECT * FROM eventhub.transactions_since('tx-sp', 0);
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SELECT eventhub.grant_organization('regress_eh_tx_reader', 'tx-sp', 'read');
SET ROLE regress_eh_tx_reader;
SELECT revision, transaction_first_revision, transaction_end FROM eventhub.transactions_since('tx-sp', 0, 2);
SELECT * FROM eventhub.transactions_since('tx-old', 0);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM eventhub.transactions_since('tx-none', 0);
\echo :LAST_ERROR_SQLSTATE
-- Argument errors come first, and tell nothing about the organization.
SELECT * FROM eventhub.transactions_since('tx-old', 0, 0);
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SELECT eventhub.revoke_organization('regress_eh_tx_reader', 'tx-sp', 'read');

DROP EXTENSION eventhub;
DROP ROLE regress_eh_tx_nobody, regress_eh_tx_reader;
