-- Horizon, gaps, pools and dead letters (docs/design.md §2-§5).

-- One row: every sequence <= horizon is visible or proven never to commit (or
-- was skipped by the gap timeout and is watched in riverbus_skipped).
CREATE TABLE riverbus_horizon (
  id boolean PRIMARY KEY DEFAULT true CONSTRAINT riverbus_horizon_single_row CHECK (id),
  horizon bigint NOT NULL DEFAULT 0,
  gaps_proven_dead bigint NOT NULL DEFAULT 0,
  gaps_skipped bigint NOT NULL DEFAULT 0,
  late_events bigint NOT NULL DEFAULT 0,
  updated_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO riverbus_horizon DEFAULT VALUES;

-- Open gaps just above the horizon: a run of missing sequences seen while a
-- higher one was visible. xid_bound is an xid assigned after the snapshot that
-- first saw the run missing, so every transaction that could still hold one of
-- these sequences has an xid below it.
CREATE TABLE riverbus_gap (
  first_sequence bigint PRIMARY KEY,
  last_sequence bigint NOT NULL,
  xid_bound xid8 NOT NULL,
  first_seen_at timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT riverbus_gap_range CHECK (last_sequence >= first_sequence)
);

-- Sequences the horizon passed by timeout while they were still missing.
-- late_at is set when one commits after all (a late event).
CREATE TABLE riverbus_skipped (
  sequence bigint PRIMARY KEY,
  xid_bound xid8 NOT NULL,
  skipped_at timestamptz NOT NULL DEFAULT now(),
  late_at timestamptz
);

CREATE TABLE riverbus_pool (
  name text PRIMARY KEY CONSTRAINT riverbus_pool_name_valid CHECK (name ~ '^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,99}$'),
  queue text NOT NULL DEFAULT 'default' CONSTRAINT riverbus_pool_queue_valid CHECK (queue ~ '^[a-z0-9]+([_|-]?[a-z0-9]+)*$' AND char_length(queue) <= 64),
  event_types text[] NOT NULL DEFAULT '{}',
  tags text[] NOT NULL DEFAULT '{}' CONSTRAINT riverbus_pool_tags_valid CHECK (riverbus_tags_valid(tags)),
  max_attempts smallint NOT NULL DEFAULT 25 CONSTRAINT riverbus_pool_max_attempts CHECK (max_attempts BETWEEN 1 AND 1000),
  priority smallint NOT NULL DEFAULT 1 CONSTRAINT riverbus_pool_priority CHECK (priority BETWEEN 1 AND 4),
  -- events with a sequence above start_after are delivered
  start_after bigint NOT NULL CONSTRAINT riverbus_pool_start_after CHECK (start_after >= 0),
  status text NOT NULL DEFAULT 'active' CONSTRAINT riverbus_pool_status CHECK (status IN ('active', 'paused')),
  -- every event <= cursor_seq has been turned into a job (or filtered out)
  cursor_seq bigint NOT NULL,
  events_fanned_out bigint NOT NULL DEFAULT 0,
  late_events_delivered bigint NOT NULL DEFAULT 0,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now()
);

-- Per pool: every job for an event <= checkpoint_seq is finished. A table of
-- its own, so advancing a checkpoint never locks the row the fan-out locks.
-- No row yet: the checkpoint is the pool's start_after.
CREATE TABLE riverbus_pool_checkpoint (
  pool text PRIMARY KEY REFERENCES riverbus_pool (name) ON DELETE CASCADE ON UPDATE CASCADE,
  checkpoint_seq bigint NOT NULL,
  updated_at timestamptz NOT NULL DEFAULT now()
);

-- Which skipped sequences each pool has handled (delivered, or filtered out),
-- so a late event reaches each pool exactly once.
CREATE TABLE riverbus_pool_late (
  pool text NOT NULL REFERENCES riverbus_pool (name) ON DELETE CASCADE ON UPDATE CASCADE,
  sequence bigint NOT NULL REFERENCES riverbus_skipped (sequence) ON DELETE CASCADE,
  handled_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (pool, sequence)
);
CREATE INDEX riverbus_pool_late_sequence ON riverbus_pool_late (sequence);

-- The global sequence of a pool job, NULL for any other job. The regular
-- expression keeps the cast from failing on other jobs' args. The same
-- expression is in checkpoint/queries.go: keep them identical, so the
-- planner uses this index.
CREATE INDEX riverbus_job_unfinished_sequence ON river_job (
  kind,
  (CASE WHEN args->>'global_sequence' ~ '^[0-9]{1,18}$' THEN (args->>'global_sequence')::bigint END)
) WHERE state NOT IN ('cancelled', 'completed', 'discarded');

-- Dead letters: a copy of every pool job that River discards, kept until an
-- operator retries or purges it, whatever River's cleaner does to river_job.
CREATE TABLE riverbus_dead_letter (
  job_id bigint PRIMARY KEY,
  pool text NOT NULL,
  global_sequence bigint,
  queue text NOT NULL,
  args jsonb NOT NULL,
  attempt smallint NOT NULL,
  max_attempts smallint NOT NULL,
  priority smallint NOT NULL,
  errors jsonb NOT NULL DEFAULT '[]',
  discarded_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX riverbus_dead_letter_pool_sequence ON riverbus_dead_letter (pool, global_sequence, job_id);

CREATE FUNCTION riverbus_dead_letter_keep() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO riverbus_dead_letter (job_id, pool, global_sequence, queue, args, attempt, max_attempts, priority, errors, discarded_at)
  SELECT NEW.id, NEW.kind,
         CASE WHEN NEW.args->>'global_sequence' ~ '^[0-9]{1,18}$' THEN (NEW.args->>'global_sequence')::bigint END,
         NEW.queue, NEW.args, NEW.attempt, NEW.max_attempts, NEW.priority,
         coalesce(to_jsonb(NEW.errors), '[]'::jsonb), coalesce(NEW.finalized_at, now())
  FROM riverbus_pool p WHERE p.name = NEW.kind
  ON CONFLICT (job_id) DO UPDATE SET
    attempt = EXCLUDED.attempt, errors = EXCLUDED.errors, discarded_at = EXCLUDED.discarded_at;
  RETURN NULL;
END
$$;

CREATE TRIGGER riverbus_dead_letter_keep AFTER UPDATE OF state ON river_job
  FOR EACH ROW WHEN (NEW.state = 'discarded' AND OLD.state IS DISTINCT FROM 'discarded')
  EXECUTE FUNCTION riverbus_dead_letter_keep();
CREATE TRIGGER riverbus_dead_letter_keep_insert AFTER INSERT ON river_job
  FOR EACH ROW WHEN (NEW.state = 'discarded')
  EXECUTE FUNCTION riverbus_dead_letter_keep();
