-- What each riverbus process is doing wrong, where any other process can
-- read it: `riverbus status` runs in a process of its own, and so do the
-- metrics of `riverbus ui`. Each process that runs a riverbus Client
-- (run, fanout, work, an application's own) keeps one row here, rewritten
-- at most once per report interval, and one row per operation that failed
-- recently (a horizon round, a pool's batch, River's completer, ...).
-- A failure storm is counted in the process's memory and written as one
-- row per operation per interval, never as a row per failure.
--
-- The database itself may be what fails (a full disk, a read-only server):
-- then these rows stop changing. reported_at is by the database's clock, and
-- report_interval says how often it should change, so a reader can tell a
-- report that is late (the process is gone, or cannot write) from a quiet
-- one, and say "unknown" rather than nothing. A process that stops cleanly
-- deletes its row; a killed one's is deleted by the others' reports once it
-- has not reported for 15 minutes.
--
-- fillfactor leaves room in each page, so rewriting a row is a HOT update
-- within its own page: it needs no new page of the table or its index,
-- which a full disk would refuse first.
CREATE TABLE riverbus_process (
  id text PRIMARY KEY,
  -- How the process names itself ("riverbus work --pool billing").
  name text NOT NULL,
  host text NOT NULL,
  pid integer NOT NULL,
  started_at timestamptz NOT NULL,
  reported_at timestamptz NOT NULL,
  report_interval interval NOT NULL,
  -- Whether it runs the horizon and the fan-out.
  fanout boolean NOT NULL,
  -- The River queues it works, with the slots River fetches into
  -- (QueueConfig.MaxWorkers): {"billing": 20}.
  queues jsonb NOT NULL DEFAULT '{}',
  CONSTRAINT riverbus_process_id_length CHECK (char_length(id) BETWEEN 1 AND 128)
) WITH (fillfactor = 50);

-- One row per failing operation of a process, and per pool or queue when
-- the operation concerns one (subject; '' otherwise). count failures since
-- since; a row goes when the operation has not failed for a while.
CREATE TABLE riverbus_process_error (
  process_id text NOT NULL REFERENCES riverbus_process (id) ON DELETE CASCADE,
  operation text NOT NULL,
  subject text NOT NULL DEFAULT '',
  count bigint NOT NULL,
  since timestamptz NOT NULL,
  last_at timestamptz NOT NULL,
  -- The last failure's message, credentials of URLs masked.
  last_error text NOT NULL,
  PRIMARY KEY (process_id, operation, subject)
) WITH (fillfactor = 50);

-- The processes that report run as riverbus_worker logins (a worker
-- process is one); they write only these rows, and any of them may expire
-- a dead process's.
GRANT SELECT, INSERT, UPDATE, DELETE ON riverbus_process, riverbus_process_error TO riverbus_worker;
