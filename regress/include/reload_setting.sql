\set ECHO none
-- \set setting NAME, \set value VALUE (or default), then \i this file: the
-- setting, one that a reload reads, changes for the whole server (ALTER
-- SYSTEM) and the session waits, 400 times 50 ms at most, until it sees
-- the new value.  Quiet: the caller shows the setting.  Test files include
-- it from the directory the suite runs in (regress/ is below it).
SELECT :'value' = 'default' AS reset_setting,
       CASE WHEN :'value' = 'default' THEN boot_val ELSE :'value' END AS wanted_value
  FROM pg_catalog.pg_settings WHERE name = :'setting' \gset
\if :reset_setting
ALTER SYSTEM RESET :setting;
\else
ALTER SYSTEM SET :setting = :'value';
\endif
\o /dev/null
SELECT pg_catalog.pg_reload_conf();
SELECT pg_catalog.format('SELECT pg_catalog.pg_sleep(0.05) WHERE pg_catalog.current_setting(%L) <> %L',
                         :'setting', :'wanted_value')
  FROM pg_catalog.generate_series(1, 400) \gexec
\o
\set ECHO all
