-- Least privilege: two group roles (NOLOGIN), one for the applications that
-- append and read events, one for the processes that run the fan-out, the
-- checkpoint advancer, the dead-letter functions and River workers. Neither
-- owns anything nor may create, alter, drop or truncate anything: the schema
-- stays with the role that runs the migrations.
--
-- The operator creates the login roles and puts them in a group, e.g.
--
--   CREATE ROLE billing_app LOGIN PASSWORD '...' IN ROLE riverbus_app;
--   CREATE ROLE billing_worker LOGIN PASSWORD '...' IN ROLE riverbus_worker;
--
-- A process that both works jobs and appends events (a handler that emits
-- follow-up events) goes IN ROLE riverbus_app, riverbus_worker. Creating and
-- deleting pools (riverbus pool create / delete, fanout.CreatePool and
-- DeletePool) is an operator's task, done as the owner, like migrating.
--
-- Roles are cluster-wide, the grants are per database: every database that
-- runs this migration creates the roles if they are missing and grants on its
-- own tables. The role that migrates needs CREATEROLE unless a superuser has
-- created the two roles beforehand. No ALTER DEFAULT PRIVILEGES: tables only
-- come from migrations, and a migration that adds one grants on it.
-- River's tables are those of River's own migrations, which Up applies first;
-- when an upgrade of River adds one, a riverbus migration grants on it.

-- CREATE ROLE checks for the name and then inserts into pg_authid. Two
-- migrations of different databases can both pass the check: the second then
-- waits for the first to commit and fails with unique_violation on
-- pg_authid's name index; it fails with duplicate_object when the other
-- committed before its check. Either way the role now exists.
DO $$
BEGIN
  IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'riverbus_app') THEN
    BEGIN
      CREATE ROLE riverbus_app NOLOGIN;
    EXCEPTION WHEN duplicate_object OR unique_violation THEN
      NULL; -- created meanwhile by the migration of another database
    END;
  END IF;
  IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'riverbus_worker') THEN
    BEGIN
      CREATE ROLE riverbus_worker NOLOGIN;
    EXCEPTION WHEN duplicate_object OR unique_violation THEN
      NULL;
    END;
  END IF;
END
$$;

-- USAGE lets both roles name the objects of the schema the tables are in;
-- not CREATE. The schema is taken from riverbus_event, so this works in
-- whatever schema the migrations ran.
DO $$
BEGIN
  EXECUTE format('GRANT USAGE ON SCHEMA %I TO riverbus_app, riverbus_worker',
    (SELECT n.nspname FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
     WHERE c.oid = 'riverbus_event'::regclass));
END
$$;

--
-- riverbus_app: append and read events, record commands. Nothing on River's
-- tables, pools, horizon, gaps or dead letters.
--

-- Append (outbox.Append, AppendIf) and read (outbox.Read, the append
-- conditions). No UPDATE, DELETE or TRUNCATE: the log is append-only.
GRANT SELECT, INSERT ON riverbus_event TO riverbus_app;

-- The BEFORE INSERT trigger riverbus_event_assign runs with the rights of the
-- inserter (it is not SECURITY DEFINER) and calls nextval on this sequence.
-- USAGE allows nextval and currval, not setval (that needs UPDATE), so the
-- most an application can do is burn numbers, which a rolled-back append does
-- anyway and the horizon proves dead. A SECURITY DEFINER trigger would run
-- as the owner (often a superuser), need a pinned search_path and a change to
-- migration 001's function, for nothing gained. pg_current_xact_id needs no
-- privilege, nor do the advisory locks of AppendIf or pg_notify.
GRANT USAGE ON SEQUENCE riverbus_event_global_sequence TO riverbus_app;

-- outbox.RecordCommandTx, and reading the audit record back.
GRANT SELECT, INSERT ON riverbus_command TO riverbus_app;

-- riverbus_event's CHECK on tags calls this function, and the inserter needs
-- EXECUTE on it. PUBLIC has it by default; granted so that the application
-- keeps working where an operator revoked EXECUTE from PUBLIC.
GRANT EXECUTE ON FUNCTION riverbus_tags_valid(text[]) TO riverbus_app;

-- migrations.Version: a process may check the schema version at start-up.
GRANT SELECT ON riverbus_migration TO riverbus_app, riverbus_worker;

--
-- riverbus_worker: the fan-out, the checkpoint advancer, the dead-letter
-- functions and River clients that work jobs.
--

-- Read the log (fan-out, late events, job handlers); appending is
-- riverbus_app's.
GRANT SELECT ON riverbus_event TO riverbus_worker;
-- Handlers may look up the command that caused an event (same transaction_id).
GRANT SELECT ON riverbus_command TO riverbus_worker;
-- The last sequence number (fanout.CreatePool from now, status).
GRANT SELECT ON SEQUENCE riverbus_event_global_sequence TO riverbus_worker;

-- The horizon (AdvanceHorizon): its single row is moved, never inserted or
-- deleted.
GRANT SELECT, UPDATE ON riverbus_horizon TO riverbus_worker;
-- Open gaps are recorded and closed.
GRANT SELECT, INSERT, DELETE ON riverbus_gap TO riverbus_worker;
-- Skipped sequences are recorded, marked late and retired.
GRANT SELECT, INSERT, UPDATE, DELETE ON riverbus_skipped TO riverbus_worker;
-- Pools are locked (FOR NO KEY UPDATE needs UPDATE), their cursor moved,
-- paused, resumed and reset; created and deleted by the owner only.
GRANT SELECT, UPDATE ON riverbus_pool TO riverbus_worker;
-- Checkpoints are upserted (checkpoint.Advance, ResetPool); rows go with
-- their pool by ON DELETE CASCADE, which needs no grant.
GRANT SELECT, INSERT, UPDATE ON riverbus_pool_checkpoint TO riverbus_worker;
-- Which late events each pool handled (INSERT ... ON CONFLICT DO NOTHING).
GRANT SELECT, INSERT ON riverbus_pool_late TO riverbus_worker;
-- Written by the trigger riverbus_dead_letter_keep on river_job, which runs
-- with the rights of whoever discards the job (River, as this role); locked,
-- listed, retried and purged by the dead-letter functions.
GRANT SELECT, INSERT, UPDATE, DELETE ON riverbus_dead_letter TO riverbus_worker;

-- River's tables after its migrations up to version 8 (River v0.51.2;
-- version 7 dropped river_client and river_client_queue): jobs are
-- inserted by the fan-out and by retries, fetched, completed, rescued,
-- scheduled and cleaned by River; queues and the leader are upserted and
-- cleaned by River's client; river_notification is River's notification
-- table (unused under PostgreSQL today, granted so an upgrade that starts
-- using it does not break workers).
GRANT SELECT, INSERT, UPDATE, DELETE ON river_job, river_queue, river_leader, river_notification TO riverbus_worker;
-- Their serial ids: nextval for inserts, SELECT for last_value.
GRANT USAGE, SELECT ON SEQUENCE river_job_id_seq, river_notification_id_seq TO riverbus_worker;
-- River's migrator and River UI read the migration version.
GRANT SELECT ON river_migration TO riverbus_worker;

-- EXECUTE on every riverbus and River function of the schema that runs with
-- the caller's rights (none is SECURITY DEFINER): calling one gives no
-- access beyond the caller's own grants, since its queries are checked
-- against the caller. The fan-out calls the lane functions, river_job's
-- unique index predicate calls river_job_state_in_bitmask, riverbus_event's
-- CHECK calls riverbus_tags_valid. PUBLIC has EXECUTE by default; granted so
-- that workers keep working where an operator revoked it. A SECURITY DEFINER
-- function would need a grant of its own, made on purpose.
DO $$
DECLARE
  f regprocedure;
BEGIN
  FOR f IN
    SELECT p.oid::regprocedure FROM pg_catalog.pg_proc p
    WHERE p.pronamespace = (SELECT c.relnamespace FROM pg_catalog.pg_class c WHERE c.oid = 'riverbus_event'::regclass)
      AND (p.proname LIKE 'riverbus\_%' OR p.proname LIKE 'river\_%')
      AND p.prokind = 'f' AND NOT p.prosecdef
    ORDER BY p.oid
  LOOP
    EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO riverbus_worker', f);
  END LOOP;
END
$$;

-- River's reindexer (leader only, daily at midnight UTC) runs REINDEX INDEX
-- CONCURRENTLY on river_job's indexes, which needs ownership or, from
-- PostgreSQL 17, the MAINTAIN privilege (VACUUM, ANALYZE, REINDEX, CLUSTER,
-- LOCK TABLE; no DDL). Before 17 the reindexer logs "must be owner" and
-- River carries on; run a client as the owner, or REINDEX from cron, there.
DO $$
BEGIN
  IF current_setting('server_version_num')::int >= 170000 THEN
    EXECUTE 'GRANT MAINTAIN ON river_job TO riverbus_worker';
  END IF;
END
$$;

-- Trigger functions need no EXECUTE grant to fire: riverbus_event's triggers
-- run for riverbus_app without one.
