-- The functions of the install's private schema (018, 022): where it is,
-- AppendIf's locks, and the schema check every delivering transaction runs
-- first (docs/design.md §10).

DO $current$
DECLARE
  s text := current_schema();
  priv text := current_setting('riverbus.private_schema');
BEGIN
  -- Where this install's private schema is, for status and for tests.
  EXECUTE format($f$CREATE OR REPLACE FUNCTION %I.riverbus_private_schema() RETURNS text
    LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $b$ SELECT %L::text $b$$f$, s, priv);

  -- AppendIf's locks (outbox): one row per bucket of the conditions' keys,
  -- locked FOR UPDATE or FOR SHARE in bucket order, for the rest of the
  -- appender's transaction. SECURITY DEFINER: riverbus_app has no USAGE on
  -- the private schema, and may take these locks only this way.
  EXECUTE format($f$CREATE OR REPLACE FUNCTION %I.riverbus_append_if_lock(p_keys bigint[], p_exclusive boolean[]) RETURNS integer
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
$b$$f$, s, priv, priv);

  -- Fails with SQLSTATE 55RBV, before the transaction changes anything,
  -- when the schema needs newer code than code (migrations.SQLSchemaCheck);
  -- its lock makes a migration that needs newer code wait for the
  -- transactions that passed it (migrations.handOver).
  EXECUTE format($f$CREATE OR REPLACE FUNCTION %I.riverbus_schema_check(code integer) RETURNS void
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $b$
DECLARE
  v_schema integer;
  v_needs integer;
BEGIN
  LOCK TABLE %I.riverbus_schema_lock IN ACCESS SHARE MODE;
  -- A statement after the lock, so its snapshot is taken after a migration
  -- that held the lock committed.
  SELECT coalesce(max(m.version), 0), coalesce(max(coalesce(m.oldest_code, m.version)), 0)
    INTO v_schema, v_needs FROM %I.riverbus_migration m;
  IF v_needs > code THEN
    RAISE EXCEPTION 'riverbus schema version %% needs code that knows version %% or newer; this code knows %%', v_schema, v_needs, code
      USING ERRCODE = '55RBV',
        DETAIL = format('schema=%%s needs=%%s code=%%s', v_schema, v_needs, code),
        HINT = 'replace this process with a build that knows the schema: it stops delivering';
  END IF;
END
$b$$f$, s, priv, s);
END
$current$;

REVOKE ALL ON FUNCTION riverbus_append_if_lock(bigint[], boolean[]), riverbus_schema_check(integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION riverbus_private_schema(), riverbus_append_if_lock(bigint[], boolean[]) TO riverbus_app, riverbus_worker;
GRANT EXECUTE ON FUNCTION riverbus_schema_check(integer) TO riverbus_worker;
