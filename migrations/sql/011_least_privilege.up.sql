-- Least privilege, tightened where a low-privilege role could do more than
-- its job needs.
--
-- riverbus_worker had UPDATE on every column of riverbus_pool, so a worker
-- login could rename a pool, change its filter, its queue or its ordering.
-- What workers do to a pool row: lock it (FOR NO KEY UPDATE needs UPDATE on
-- one column), move the cursor and its counters (the fan-out), pause and
-- resume (status) and reset (cursor_seq, start_after). Those columns only;
-- everything else in the row is the owner's, as creating and deleting
-- pools is.
REVOKE UPDATE ON riverbus_pool FROM riverbus_worker;
GRANT UPDATE (status, cursor_seq, start_after, events_fanned_out, late_events_delivered, updated_at)
  ON riverbus_pool TO riverbus_worker;

-- riverbus_command's transaction id was a column default, so an inserter
-- could name any transaction, including a future one, whose own
-- RecordCommandTx would then fail on the primary key. The database sets it,
-- as the event trigger does for events, whatever the inserter supplied.
-- An UPDATE of it is refused, as one of an event's is.
CREATE FUNCTION riverbus_command_assign() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'UPDATE' THEN
    RAISE EXCEPTION 'riverbus_command: transaction_id cannot be changed';
  END IF;
  NEW.transaction_id := pg_current_xact_id();
  RETURN NEW;
END
$$;

CREATE TRIGGER riverbus_command_assign BEFORE INSERT OR UPDATE OF transaction_id ON riverbus_command
  FOR EACH ROW EXECUTE FUNCTION riverbus_command_assign();

-- As 004 does for every function of the schema.
GRANT EXECUTE ON FUNCTION riverbus_command_assign() TO riverbus_worker;
