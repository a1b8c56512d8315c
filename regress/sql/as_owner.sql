-- The owner bracket (guard.c): eventhub's functions run their statements as
-- the extension's owner, then put the caller's role, its settings and the
-- write guard back, also after an error inside that a savepoint catches.
CREATE EXTENSION eventhub;
CREATE ROLE regress_eh_bracket;
GRANT USAGE ON SCHEMA eventhub TO regress_eh_bracket;
GRANT EXECUTE ON FUNCTION eventhub.publish_event(text, text, text, text, text, jsonb, timestamptz)
  TO regress_eh_bracket;
SET search_path = public;
\set VERBOSITY sqlstate

SET ROLE regress_eh_bracket;
SELECT eventhub.publish_event('o-1', 'API', 'CREATE', 'e-1', 'c-1', '{}');
-- The same correlation id with other content fails inside the bracket.
BEGIN;
SAVEPOINT s;
SELECT eventhub.publish_event('o-1', 'API', 'CREATE', 'e-1', 'c-1', '{"other": 1}');
ROLLBACK TO SAVEPOINT s;
SELECT current_user = 'regress_eh_bracket' AS caller_is_back,
       current_setting('search_path') = 'public' AS search_path_is_back;
SELECT eventhub.publish_event('o-1', 'API', 'CREATE', 'e-2', 'c-2', '{}');
COMMIT;
-- The same from a PL/pgSQL exception block.
\set VERBOSITY default
DO $$
BEGIN
  PERFORM eventhub.publish_event('o-1', 'API', 'CREATE', 'e-1', 'c-1', '{"other": 2}');
EXCEPTION WHEN unique_violation THEN
  RAISE NOTICE 'caught; back as the caller: %, with its search_path: %',
    current_user = 'regress_eh_bracket', current_setting('search_path') = 'public';
END $$;
\set VERBOSITY sqlstate
RESET ROLE;

-- A superuser, for whom only the write guard stands in the way: after the
-- caught error, writing directly is refused again.
BEGIN;
SAVEPOINT s;
SELECT eventhub.publish_event('o-1', 'API', 'CREATE', 'e-1', 'c-1', '{"other": 3}');
ROLLBACK TO SAVEPOINT s;
INSERT INTO eventhub.events VALUES ('o-1', 3, gen_random_uuid(), now(), now(), 'API', 'CREATE', 'x', 'c-x', '{}');
ROLLBACK;
SELECT string_agg(revision || ':' || correlation_id, ' ' ORDER BY revision) AS events
  FROM eventhub.events;

\set VERBOSITY default
DROP EXTENSION eventhub;
DROP ROLE regress_eh_bracket;
RESET search_path;
