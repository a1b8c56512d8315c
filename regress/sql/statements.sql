-- eventhub.statements(): every SQL statement the extension runs, printed
-- whole with the types of its parameters, so that a reviewer reads here
-- what runs; each one prepares with those types and plans (a statement
-- that does not fails this test).  extension/check_statements.sh proves
-- from the object files that the list is complete.
CREATE EXTENSION eventhub;

-- Not open to PUBLIC.
SELECT has_function_privilege('public', 'eventhub.statements()', 'EXECUTE') AS public_may_list;

-- Names are unique; the parameters' types are as many as the statement's
-- highest $n.
SELECT count(*) AS statements, count(DISTINCT name) AS names
  FROM eventhub.statements();
SELECT name, cardinality(argument_types) AS parameters,
       (SELECT max(m[1]::int) FROM regexp_matches(statement, '\$([0-9]+)', 'g') m) AS highest
  FROM eventhub.statements()
 WHERE cardinality(argument_types) IS DISTINCT FROM
       coalesce((SELECT max(m[1]::int) FROM regexp_matches(statement, '\$([0-9]+)', 'g') m), 0);

-- Every statement, whole.
\pset format unaligned
\pset tuples_only on
SELECT format(E'-- %s%s\n%s;\n', name,
              CASE WHEN cardinality(argument_types) > 0
                   THEN ' (' || array_to_string(argument_types::text[], ', ') || ')' END,
              statement)
  FROM eventhub.statements() ORDER BY name COLLATE "C";
\pset format aligned
\pset tuples_only off

-- Each prepares with its parameters' types and plans, generic plan and all.
SET plan_cache_mode = force_generic_plan;
CREATE FUNCTION pg_temp.planned() RETURNS TABLE (name text, plan_lines int) LANGUAGE plpgsql AS $$
DECLARE
    s record;
    line text;
BEGIN
    FOR s IN SELECT * FROM eventhub.statements() ORDER BY 1 LOOP
        EXECUTE format('PREPARE eventhub_statement%s AS %s',
                       CASE WHEN cardinality(s.argument_types) > 0
                            THEN '(' || array_to_string(s.argument_types::text[], ', ') || ')' ELSE '' END,
                       s.statement);
        name := s.name;
        plan_lines := 0;
        FOR line IN EXECUTE format('EXPLAIN (COSTS OFF) EXECUTE eventhub_statement%s',
                                   CASE WHEN cardinality(s.argument_types) > 0
                                        THEN '(' || array_to_string(array_fill('NULL'::text, ARRAY[cardinality(s.argument_types)]), ', ') || ')'
                                        ELSE '' END) LOOP
            plan_lines := plan_lines + 1;
        END LOOP;
        DEALLOCATE eventhub_statement;
        RETURN NEXT;
    END LOOP;
END
$$;
SELECT count(*) AS planned, count(*) FILTER (WHERE plan_lines > 0) AS with_a_plan,
       (SELECT count(*) FROM eventhub.statements()) AS listed
  FROM pg_temp.planned();
RESET plan_cache_mode;

DROP EXTENSION eventhub;
