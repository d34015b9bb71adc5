-- Writers that use two-phase commit.
--
-- PostgreSQL refuses to PREPARE a transaction that has executed NOTIFY, and
-- the statement trigger riverbus_event_notify of 001 notifies on every
-- append, so an application that PREPAREs its transactions could not append
-- at all. The wake-up is only a wake-up: the fan-out also polls
-- (RIVERBUS_POLL_INTERVAL), so a writer may switch it off for its
-- transaction or session with the custom setting riverbus.notify:
--
--   SET LOCAL riverbus.notify = off;   -- outbox.SkipNotifyTx does this
--
-- or for every session of a connection pool, with the connection parameter
-- options='-c riverbus.notify=off'. Any boolean spelling works (off, false,
-- 0, no); unset or empty means on. A value that is not a boolean makes the
-- append fail rather than notify by surprise.
--
-- CREATE OR REPLACE keeps the function's owner and grants (004).
CREATE OR REPLACE FUNCTION riverbus_event_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF coalesce(nullif(current_setting('riverbus.notify', true), '')::boolean, true) THEN
    PERFORM pg_notify('riverbus_event', '');
  END IF;
  RETURN NULL;
END
$$;
