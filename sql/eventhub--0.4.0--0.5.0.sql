-- eventhub 0.4.0 -> 0.5.0.  Run by ALTER EXTENSION eventhub UPDATE.
--
-- New: eventhub.metrics(), the metrics operators alert on in Prometheus'
-- data model.  Nothing else changes in the schema: no table is touched,
-- and a database updated from 0.4.0 (or, through it, from any earlier
-- release) and a fresh 0.5.0 installation have the same catalog
-- (regress/sql/update.sql and regress/t/017_upgrade.pl check it).

\echo Use "ALTER EXTENSION eventhub UPDATE TO '0.5.0'" to load this file. \quit

-- Runs as the caller; its one statement runs as the owner with the
-- visibility rule of replica_status for the calling role, and qualifies
-- every name, operators included (extension/metrics_report.c).  jit off:
-- its statement's estimates exceed JIT's thresholds with many progress
-- rows, and compiling it cost a second per call (make bench, item 10).
CREATE FUNCTION eventhub.metrics()
RETURNS TABLE (name text, labels jsonb, type text, help text, value double precision)
AS 'MODULE_PATHNAME', 'metrics'
LANGUAGE C STABLE ROWS 500
SET search_path = pg_catalog, pg_temp
SET jit = off;

COMMENT ON FUNCTION eventhub.metrics() IS
'Metrics in Prometheus'' data model, one row per series: name (eventhub_...), labels (a JSON object of strings, {} when none; per-replica series carry {"replica": "<replica id>"}), type (counter or gauge), help and value. Counters (_total) count since the server started (they need the library preloaded, else 0); no series is per organization. Under access control, replicas and organizations as replica_status shows them to the calling role.';

-- As every function of the install script: nothing for PUBLIC.
-- docs/operations.md (Roles) grants it to the operator role.
REVOKE ALL ON FUNCTION eventhub.metrics() FROM PUBLIC;
