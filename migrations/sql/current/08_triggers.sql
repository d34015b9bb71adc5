-- Every trigger riverbus ships, each as pg_get_triggerdef prints it with
-- search_path = pg_catalog (every name qualified, the WHEN clause as the
-- server keeps it): migrate compares each with the trigger in the database
-- and runs CREATE OR REPLACE TRIGGER only for one that is missing or
-- differs. That statement locks its table against writes (SHARE ROW
-- EXCLUSIVE), so an up-to-date database is left alone: a migrate while
-- appends and workers run, or while another login holds a lock on
-- river_job, waits for nobody. TestTriggersAreWrittenAsTheServerPrintsThem
-- fails, and prints the text to write, when one is not in that form.
-- %1$I is the install's schema. Their functions are in the files before
-- this one.
DO $current$
DECLARE
  s text := current_schema();
  path text := current_setting('search_path');
  def text;
BEGIN
  PERFORM set_config('search_path', 'pg_catalog, pg_temp', true);
  FOREACH def IN ARRAY ARRAY[
    -- A pool job River discards is copied to riverbus_dead_letter (002)...
    'CREATE TRIGGER riverbus_dead_letter_keep AFTER UPDATE OF state ON %1$I.river_job'
      || ' FOR EACH ROW'
      || ' WHEN (((new.state = ''discarded''::%1$I.river_job_state) AND (old.state IS DISTINCT FROM ''discarded''::%1$I.river_job_state)))'
      || ' EXECUTE FUNCTION %1$I.riverbus_dead_letter_keep()',
    -- ...and so is one inserted discarded.
    'CREATE TRIGGER riverbus_dead_letter_keep_insert AFTER INSERT ON %1$I.river_job'
      || ' FOR EACH ROW'
      || ' WHEN ((new.state = ''discarded''::%1$I.river_job_state))'
      || ' EXECUTE FUNCTION %1$I.riverbus_dead_letter_keep()',
    -- An undeliverable event's dead letter put back to work gets its envelope
    -- back (007). Named to fire before riverbus_job_back_to_work (BEFORE
    -- triggers fire in name order): a refused retry leaves the job discarded.
    'CREATE TRIGGER riverbus_job_back_rebuild BEFORE UPDATE OF state ON %1$I.river_job'
      || ' FOR EACH ROW'
      || ' WHEN (((old.state = ''discarded''::%1$I.river_job_state) AND (new.state <> ALL (ARRAY[''cancelled''::%1$I.river_job_state, ''completed''::%1$I.river_job_state, ''discarded''::%1$I.river_job_state])) AND (new.args ? ''undeliverable''::text)))'
      || ' EXECUTE FUNCTION %1$I.riverbus_undeliverable_rebuild()',
    -- A discarded job put back to work (its dead letter goes), or a lane job
    -- coming back to work outside the lane release (it waits in line; 009).
    'CREATE TRIGGER riverbus_job_back_to_work BEFORE UPDATE OF state ON %1$I.river_job'
      || ' FOR EACH ROW'
      || ' WHEN ((((old.state = ''discarded''::%1$I.river_job_state) AND (new.state <> ALL (ARRAY[''cancelled''::%1$I.river_job_state, ''completed''::%1$I.river_job_state, ''discarded''::%1$I.river_job_state]))) OR ((new.metadata ? ''riverbus_lane''::text) AND (new.state = ANY (ARRAY[''available''::%1$I.river_job_state, ''retryable''::%1$I.river_job_state, ''running''::%1$I.river_job_state, ''scheduled''::%1$I.river_job_state])) AND (old.state = ANY (ARRAY[''cancelled''::%1$I.river_job_state, ''completed''::%1$I.river_job_state, ''pending''::%1$I.river_job_state])) AND (current_setting(''riverbus.lane_release''::text, true) IS DISTINCT FROM ''on''::text))))'
      || ' EXECUTE FUNCTION %1$I.riverbus_job_back_to_work()',
    -- A lane job deleted in flight releases its lane (003).
    'CREATE TRIGGER riverbus_lane_deleted AFTER DELETE ON %1$I.river_job'
      || ' FOR EACH ROW'
      || ' WHEN (((old.metadata ? ''riverbus_lane''::text) AND (old.state <> ALL (ARRAY[''cancelled''::%1$I.river_job_state, ''completed''::%1$I.river_job_state, ''discarded''::%1$I.river_job_state, ''pending''::%1$I.river_job_state]))))'
      || ' EXECUTE FUNCTION %1$I.riverbus_lane_finished()',
    -- Every statement that finishes lane jobs releases their lanes at once
    -- (005).
    'CREATE TRIGGER riverbus_lane_finished AFTER UPDATE ON %1$I.river_job'
      || ' REFERENCING OLD TABLE AS riverbus_job_old NEW TABLE AS riverbus_job_new'
      || ' FOR EACH STATEMENT'
      || ' EXECUTE FUNCTION %1$I.riverbus_lanes_finished()',
    -- A running pool job River's rescuer discards with attempts left is
    -- retried (005, 014).
    'CREATE TRIGGER riverbus_rescue_retry BEFORE UPDATE OF state ON %1$I.river_job'
      || ' FOR EACH ROW'
      || ' WHEN (((old.state = ''running''::%1$I.river_job_state) AND (new.state = ''discarded''::%1$I.river_job_state) AND (new.attempt < new.max_attempts)))'
      || ' EXECUTE FUNCTION %1$I.riverbus_rescue_retry()',
    -- No job is written on a WAL timeline the fence has not handled (020)...
    'CREATE TRIGGER riverbus_timeline_guard BEFORE INSERT OR UPDATE ON %1$I.river_job'
      || ' FOR EACH STATEMENT'
      || ' EXECUTE FUNCTION %1$I.riverbus_timeline_guard()',
    -- The database sets a command's transaction id (011).
    'CREATE TRIGGER riverbus_command_assign BEFORE INSERT OR UPDATE OF transaction_id ON %1$I.riverbus_command'
      || ' FOR EACH ROW'
      || ' EXECUTE FUNCTION %1$I.riverbus_command_assign()',
    -- Every insert path (Go, psql, COPY) gets its xid, then its number, here
    -- (001).
    'CREATE TRIGGER riverbus_event_assign BEFORE INSERT ON %1$I.riverbus_event'
      || ' FOR EACH ROW'
      || ' EXECUTE FUNCTION %1$I.riverbus_event_assign()',
    -- The log is append-only in the columns the fan-out relies on (001).
    'CREATE TRIGGER riverbus_event_immutable BEFORE UPDATE ON %1$I.riverbus_event'
      || ' FOR EACH ROW'
      || ' EXECUTE FUNCTION %1$I.riverbus_event_immutable()',
    -- One wake-up per statement (001, 010).
    'CREATE TRIGGER riverbus_event_notify AFTER INSERT ON %1$I.riverbus_event'
      || ' FOR EACH STATEMENT'
      || ' EXECUTE FUNCTION %1$I.riverbus_event_notify()',
    -- The append time, which retention keeps by (019).
    'CREATE TRIGGER riverbus_event_stamp BEFORE INSERT ON %1$I.riverbus_event'
      || ' FOR EACH ROW'
      || ' EXECUTE FUNCTION %1$I.riverbus_event_stamp()',
    -- ...nor does the horizon move.
    'CREATE TRIGGER riverbus_timeline_guard BEFORE UPDATE ON %1$I.riverbus_horizon'
      || ' FOR EACH STATEMENT'
      || ' EXECUTE FUNCTION %1$I.riverbus_timeline_guard()',
    -- Every new pool gets its lane bucket rows (012).
    -- River UI's (or River's) pause and resume of a queue move its pools
    -- (023)...
    'CREATE TRIGGER riverbus_queue_paused AFTER UPDATE OF paused_at ON %1$I.river_queue'
      || ' FOR EACH ROW'
      || ' WHEN ((old.paused_at IS DISTINCT FROM new.paused_at))'
      || ' EXECUTE FUNCTION %1$I.riverbus_queue_paused()',
    -- ...and a queue row made anew starts paused if all its pools are.
    'CREATE TRIGGER riverbus_queue_paused_insert BEFORE INSERT ON %1$I.river_queue'
      || ' FOR EACH ROW'
      || ' EXECUTE FUNCTION %1$I.riverbus_queue_paused()',
    'CREATE TRIGGER riverbus_lane_lock_rows AFTER INSERT ON %1$I.riverbus_pool'
      || ' FOR EACH ROW'
      || ' EXECUTE FUNCTION %1$I.riverbus_lane_lock_rows()'
  ] LOOP
    def := format(def, s);
    IF NOT EXISTS (SELECT FROM pg_trigger t WHERE NOT t.tgisinternal AND pg_get_triggerdef(t.oid) = def) THEN
      EXECUTE 'CREATE OR REPLACE ' || substr(def, length('CREATE ') + 1);
    END IF;
  END LOOP;
  PERFORM set_config('search_path', path, true);
END
$current$;
