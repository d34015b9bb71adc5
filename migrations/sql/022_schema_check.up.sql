-- Rolling upgrades (issue #22): a process must stop delivering as soon as
-- the schema is newer than its code knows. Until now only the start-up
-- check compared versions, and only for a schema older than the code: an
-- old fan-out kept running rounds beside a new one, and since 018 moved the
-- round's lock their locks no longer excluded each other.
--
-- From here on, every transaction that delivers (a horizon round, a pool
-- batch, a retention batch) calls riverbus_schema_check(code) first, with
-- the newest migration version its code knows. The function raises
-- SQLSTATE 55RBV, which aborts the transaction before it changes anything,
-- when some applied migration needs newer code.
--
-- riverbus_migration.oldest_code is that need, per migration: the oldest
-- code version that may still run against it. NULL (every migration so
-- far) means the migration's own version: no older code may. A migration
-- that only adds what old code never touches may say so with a line
--   -- riverbus:oldest-code NNN
-- (migrations.All reads it, migrations.Up records it).
--
-- The handover: migrate takes riverbus_schema_lock (in the private schema,
-- which only riverbus's roles may name, docs/design.md §2.6; only its owner may
-- lock it, and the check runs as that owner) in ACCESS EXCLUSIVE
-- mode before it applies a migration that old code may not run against.
-- The check takes it in ACCESS SHARE mode, and then reads the versions in a
-- statement of its own, so with a fresh snapshot: the migration waits for
-- every transaction that passed the check, and every check that follows
-- waits for the migration and then sees its row.
ALTER TABLE riverbus_migration ADD COLUMN oldest_code integer
  CHECK (oldest_code > 0 AND oldest_code < version);

DO $migration$
DECLARE
  priv text := current_setting('riverbus.private_schema', true);
  install text := current_schema();
BEGIN
  IF priv IS NULL OR priv = '' THEN
    RAISE EXCEPTION 'migration 022 needs the setting riverbus.private_schema: apply riverbus migrations with riverbus migrate (migrations.Up), which creates that schema';
  END IF;
  -- No grant on it: only the check, which runs as its owner, locks it.
  EXECUTE format('CREATE TABLE %I.riverbus_schema_lock ()', priv);

  EXECUTE format($f$CREATE FUNCTION %I.riverbus_schema_check(code integer) RETURNS void
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
$b$$f$, install, priv, install);
  -- Not PUBLIC's: a login that could call it could hold the lock in an
  -- idle transaction and make the next migrate wait for it.
  EXECUTE format('REVOKE EXECUTE ON FUNCTION %I.riverbus_schema_check(integer) FROM PUBLIC', install);
  EXECUTE format('GRANT EXECUTE ON FUNCTION %I.riverbus_schema_check(integer) TO riverbus_worker', install);
END
$migration$;
