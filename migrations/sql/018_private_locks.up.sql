-- The locks riverbus waits on, out of reach of every login but riverbus's.
--
-- PostgreSQL takes a table's lock while it parses a statement, before it
-- checks privileges: a login with no grant at all that ran
--   BEGIN; PREPARE p AS SELECT * FROM riverbus_horizon_lock FOR UPDATE;
-- and stayed idle held a lock that conflicts with the round's (012), and
-- stopped the horizon for every pool; the same on riverbus_retention_lock
-- (015) hung retention and every pool create and reset. A grant cannot
-- keep a login from that; the name lookup can: a name in a schema the
-- login has no USAGE on is refused before anything is locked.
--
-- So riverbus's locks move to a schema of this install's own, whose USAGE
-- only riverbus_worker (and the owner) has; not PUBLIC, not riverbus_app.
-- migrations.Up creates it before the first migration (its own lock lives
-- there) and names it in the setting riverbus.private_schema for each
-- migration: riverbus_private_ and the install's schema, or a hash of that
-- schema's name when it is too long for an identifier, so two installs in
-- one database never share one. riverbus_private_schema() returns it.
--
-- Every function made here names what it uses: tables schema-qualified
-- (the names are put in when this migration runs), and search_path pinned
-- to pg_catalog, pg_temp, so nothing resolves through a schema another
-- role can create in.
DO $migration$
DECLARE
  priv text := current_setting('riverbus.private_schema', true);
  install text := current_schema();
  def text;
  replaced text;
BEGIN
  IF priv IS NULL OR priv = '' THEN
    RAISE EXCEPTION 'migration 018 needs the setting riverbus.private_schema: apply riverbus migrations with riverbus migrate (migrations.Up), which creates that schema';
  END IF;
  IF NOT EXISTS (SELECT FROM pg_catalog.pg_namespace WHERE nspname = priv) THEN
    RAISE EXCEPTION 'migration 018: the private schema % does not exist', priv;
  END IF;

  EXECUTE format('COMMENT ON SCHEMA %I IS %L', priv,
    format('riverbus: the locks of the riverbus install in schema %I. USAGE only for riverbus_worker and the owner.', install));
  EXECUTE format('REVOKE ALL ON SCHEMA %I FROM PUBLIC, riverbus_app', priv);
  EXECUTE format('GRANT USAGE ON SCHEMA %I TO riverbus_worker', priv);

  -- Where this install's private schema is, for status and for tests.
  EXECUTE format($f$CREATE FUNCTION %I.riverbus_private_schema() RETURNS text
    LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $b$ SELECT %L::text $b$$f$, install, priv);
  EXECUTE format('GRANT EXECUTE ON FUNCTION %I.riverbus_private_schema() TO riverbus_app, riverbus_worker', install);

  -- The round's lock (docs/design.md §2.6), and its try-lock. The table keeps
  -- its grant (UPDATE to riverbus_worker, which LOCK TABLE needs).
  EXECUTE format('ALTER TABLE %I.riverbus_horizon_lock SET SCHEMA %I', install, priv);
  EXECUTE format($f$CREATE OR REPLACE FUNCTION %I.riverbus_horizon_try_lock() RETURNS boolean
    LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $b$
BEGIN
  LOCK TABLE %I.riverbus_horizon_lock IN EXCLUSIVE MODE NOWAIT;
  RETURN true;
EXCEPTION WHEN lock_not_available THEN
  RETURN false;
END
$b$$f$, install, priv);

  -- Who holds the round's lock: a round that keeps finding it taken says
  -- who has it (another instance's round, or a worker login that parsed a
  -- statement on it and sat idle).
  EXECUTE format($f$CREATE FUNCTION %I.riverbus_horizon_lock_holders()
    RETURNS TABLE (pid integer, role text, application_name text, state text, state_for float8)
    LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $b$
  SELECT l.pid, coalesce(a.usename::text, ''), coalesce(a.application_name, ''), coalesce(a.state, ''),
    coalesce(extract(epoch FROM clock_timestamp() - a.state_change), 0)::float8
  FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
  WHERE l.locktype = 'relation' AND l.granted
    AND l.database = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())
    AND l.relation = %L::regclass
  ORDER BY l.pid
$b$$f$, install, format('%I.riverbus_horizon_lock', priv));
  EXECUTE format('GRANT EXECUTE ON FUNCTION %I.riverbus_horizon_try_lock(), %I.riverbus_horizon_lock_holders() TO riverbus_worker',
    install, install);

  -- Retention's lock (docs/design.md §8). Pool create and reset take it through
  -- riverbus_retention_start_lock; the batch, riverbus_retention_step,
  -- names it in its body, which is rewritten to the new name whatever
  -- else earlier migrations made of it (its search_path, qualified names).
  EXECUTE format('ALTER TABLE %I.riverbus_retention_lock SET SCHEMA %I', install, priv);
  EXECUTE format($f$CREATE FUNCTION %I.riverbus_retention_start_lock() RETURNS void
    LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $b$
BEGIN
  LOCK TABLE %I.riverbus_retention_lock IN ROW EXCLUSIVE MODE;
END
$b$$f$, install, priv);
  EXECUTE format('GRANT EXECUTE ON FUNCTION %I.riverbus_retention_start_lock() TO riverbus_worker', install);

  SELECT pg_catalog.pg_get_functiondef(p.oid) INTO def FROM pg_catalog.pg_proc p
  WHERE p.oid = format('%I.riverbus_retention_step(bigint, timestamptz, interval, integer, boolean)', install)::regprocedure;
  replaced := pg_catalog.regexp_replace(def,
    'LOCK TABLE\s+(("[^"]+"|[A-Za-z0-9_$]+)\.)?riverbus_retention_lock\M',
    format('LOCK TABLE %I.riverbus_retention_lock', priv));
  IF replaced = def OR replaced ~ 'LOCK TABLE\s+(("[^"]+"|[A-Za-z0-9_$]+)\.)?riverbus_retention_lock\M.*LOCK TABLE\s+(("[^"]+"|[A-Za-z0-9_$]+)\.)?riverbus_retention_lock\M' THEN
    RAISE EXCEPTION 'migration 018: riverbus_retention_step does not take riverbus_retention_lock exactly once';
  END IF;
  EXECUTE replaced;

  -- AppendIf's locks (outbox): one row per bucket of the conditions' tag
  -- and type keys, locked FOR UPDATE (exclusive) or FOR SHARE, in bucket
  -- order, for the rest of the appender's transaction. Advisory locks,
  -- which they replace, could be taken by any login on keys anyone can
  -- compute. Two keys in one bucket only make their appenders wait for
  -- each other, never miss each other.
  EXECUTE format('CREATE TABLE %I.riverbus_append_lock (bucket integer PRIMARY KEY CONSTRAINT riverbus_append_lock_bucket CHECK (bucket BETWEEN 0 AND 4095))', priv);
  EXECUTE format('INSERT INTO %I.riverbus_append_lock (bucket) SELECT generate_series(0, 4095)', priv);
  -- SECURITY DEFINER: riverbus_app has no USAGE on the private schema; it
  -- may take these locks only through this function, and only as AppendIf
  -- takes them. The row locks belong to the caller's transaction.
  EXECUTE format($f$CREATE FUNCTION %I.riverbus_append_if_lock(p_keys bigint[], p_exclusive boolean[]) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $b$
DECLARE
  b record;
  n integer := 0;
BEGIN
  IF cardinality(p_keys) IS DISTINCT FROM cardinality(p_exclusive) THEN
    RAISE EXCEPTION 'riverbus_append_if_lock: p_keys and p_exclusive must have the same length';
  END IF;
  FOR b IN
    SELECT (((u.k %% 4096) + 4096) %% 4096)::integer AS bucket, bool_or(coalesce(u.x, true)) AS exclusive
    FROM unnest(p_keys, p_exclusive) AS u(k, x) WHERE u.k IS NOT NULL
    GROUP BY 1 ORDER BY 1
  LOOP
    IF b.exclusive THEN
      PERFORM 1 FROM %I.riverbus_append_lock l WHERE l.bucket = b.bucket FOR UPDATE;
    ELSE
      PERFORM 1 FROM %I.riverbus_append_lock l WHERE l.bucket = b.bucket FOR SHARE;
    END IF;
    n := n + 1;
  END LOOP;
  RETURN n;
END
$b$$f$, install, priv, priv);
  EXECUTE format('REVOKE EXECUTE ON FUNCTION %I.riverbus_append_if_lock(bigint[], boolean[]) FROM PUBLIC', install);
  EXECUTE format('GRANT EXECUTE ON FUNCTION %I.riverbus_append_if_lock(bigint[], boolean[]) TO riverbus_app, riverbus_worker', install);
END
$migration$;
