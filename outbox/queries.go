package outbox

// The SQL of this package. The schema is migrations/sql/001_events.up.sql.
//
// Events travel as one jsonb array ($1 of appendQuery and appendIfQuery),
// one element per event in input order:
//
//	{"event_id": "...", "type": "...", "key": "...", "tags": ["a=b"],
//	 "data": {...}, "metadata": {...}, "occurred_at": "..." (optional),
//	 "version": 1}
//
// so a call is one statement whatever the number of events. Data is taken
// with -> rather than a typed record column so that a JSON null stays a jsonb
// null instead of becoming SQL NULL.
//
// A Query travels split by the index that serves it best:
//   - items without tags as one text[] of types: the (type, global_sequence)
//     index;
//   - items with tags as a jsonb array of {"types": [...], "tags": [...]}:
//     the GIN index on tags (tags @> item tags), types filtered after. The
//     OFFSET 0 around these scans keeps the planner, which cannot know the
//     item's tags when it plans, from walking the primary key in order in
//     the hope of meeting a match early: a full scan when there is none.
//
// jsonb_to_recordset is estimated at 100 rows whatever its argument; the
// LIMIT jsonb_array_length(...) around it, a constant once the parameter is
// bound, gives the planner the real number of items, which keeps the
// estimated cost of a query of one or two items low and honest (a high one
// also triggers JIT compilation, tens of milliseconds per query).
//
// global_sequence and transaction_id are never written here: the BEFORE
// INSERT trigger assigns them.

// appendQuery inserts the events of $1 in input order and returns what the
// trigger assigned.
const appendQuery = `
INSERT INTO riverbus_event (event_id, type, key, tags, data, metadata, occurred_at, version)
SELECT (e.rec->>'event_id')::uuid,
       e.rec->>'type',
       e.rec->>'key',
       ARRAY(SELECT t.tag FROM jsonb_array_elements_text(e.rec->'tags') WITH ORDINALITY AS t(tag, n) ORDER BY t.n),
       e.rec->'data',
       e.rec->'metadata',
       coalesce((e.rec->>'occurred_at')::timestamptz, now()),
       (e.rec->>'version')::int
FROM jsonb_array_elements($1::jsonb) WITH ORDINALITY AS e(rec, n)
ORDER BY e.n
RETURNING global_sequence, event_id`

// lockQuery takes the transaction-level locks of a conditional append:
// exclusive where $2 is true, shared otherwise, on the buckets of the keys of
// $1, in bucket order so that two appenders never deadlock (migration 018).
// It must be a statement of its own, before appendIfQuery: in READ COMMITTED
// a statement sees what was committed before it started, so the check has
// to start after the locks are held to see the events of the appender that
// held them.
const lockQuery = `SELECT riverbus_append_if_lock($1::bigint[], $2::boolean[])`

// appendIfQuery checks an append condition and, when it holds, inserts the
// events of $1 like appendQuery.
//
//	$2, $3  FailIfEventsMatch: types of items without tags, items with tags
//	$4      After: only events above it conflict
//	$5, $6  IdempotencyQuery: types of items without tags, items with tags
//
// It returns one row per inserted event, or a single row with no event when
// nothing was inserted; every row carries the lowest conflicting and the
// lowest duplicate sequence (NULL when none) and the isolation level, since
// under REPEATABLE READ the check could not see events committed after the
// transaction's snapshot and nothing is inserted.
const appendIfQuery = `
WITH conflict AS (
  SELECT min(m.global_sequence) AS global_sequence
  FROM (
    SELECT min(x.global_sequence) AS global_sequence FROM riverbus_event x
    WHERE x.type = ANY ($2::text[]) AND x.global_sequence > $4
    UNION ALL
    SELECT (SELECT min(x.global_sequence) FROM (
              SELECT x.global_sequence FROM riverbus_event x
              WHERE x.tags @> q.tags AND (cardinality(q.types) = 0 OR x.type = ANY (q.types)) AND x.global_sequence > $4
              OFFSET 0) x)
    FROM (SELECT * FROM jsonb_to_recordset($3::jsonb) AS q(types text[], tags text[]) LIMIT jsonb_array_length($3::jsonb)) q
  ) m
), duplicate AS (
  SELECT min(m.global_sequence) AS global_sequence
  FROM (
    SELECT min(x.global_sequence) AS global_sequence FROM riverbus_event x
    WHERE x.type = ANY ($5::text[])
    UNION ALL
    SELECT (SELECT min(x.global_sequence) FROM (
              SELECT x.global_sequence FROM riverbus_event x
              WHERE x.tags @> q.tags AND (cardinality(q.types) = 0 OR x.type = ANY (q.types))
              OFFSET 0) x)
    FROM (SELECT * FROM jsonb_to_recordset($6::jsonb) AS q(types text[], tags text[]) LIMIT jsonb_array_length($6::jsonb)) q
  ) m
), settings AS (
  SELECT current_setting('transaction_isolation') AS isolation
), appended AS (
  INSERT INTO riverbus_event (event_id, type, key, tags, data, metadata, occurred_at, version)
  SELECT (e.rec->>'event_id')::uuid,
         e.rec->>'type',
         e.rec->>'key',
         ARRAY(SELECT t.tag FROM jsonb_array_elements_text(e.rec->'tags') WITH ORDINALITY AS t(tag, n) ORDER BY t.n),
         e.rec->'data',
         e.rec->'metadata',
         coalesce((e.rec->>'occurred_at')::timestamptz, now()),
         (e.rec->>'version')::int
  FROM jsonb_array_elements($1::jsonb) WITH ORDINALITY AS e(rec, n)
  WHERE (SELECT global_sequence FROM conflict) IS NULL
    AND (SELECT global_sequence FROM duplicate) IS NULL
    AND (SELECT isolation FROM settings) <> 'repeatable read'
  ORDER BY e.n
  RETURNING global_sequence, event_id
)
SELECT c.global_sequence, d.global_sequence, s.isolation, a.global_sequence, a.event_id
FROM conflict c
CROSS JOIN duplicate d
CROSS JOIN settings s
LEFT JOIN appended a ON true`

// readQuery returns the events of a query in sequence order.
//
//	$1, $2  the query: types of items without tags, items with tags
//	$3      After
//	$4      Limit, NULL for none
//
// Each item yields at most $4 events from its index; they are merged,
// de-duplicated and cut to $4.
const readQuery = `
SELECT DISTINCT ON (m.global_sequence) m.global_sequence, m.event_id, m.type, m.key, m.tags, m.data, m.metadata, m.occurred_at, m.version
FROM (
  (SELECT x.global_sequence, x.event_id, x.type, x.key, x.tags, x.data, x.metadata, x.occurred_at, x.version
   FROM riverbus_event x
   WHERE x.type = ANY ($1::text[]) AND x.global_sequence > $3
   ORDER BY x.global_sequence LIMIT $4::bigint)
  UNION ALL
  SELECT x.*
  FROM (SELECT * FROM jsonb_to_recordset($2::jsonb) AS q(types text[], tags text[]) LIMIT jsonb_array_length($2::jsonb)) q,
  LATERAL (SELECT x.* FROM (
             SELECT x.global_sequence, x.event_id, x.type, x.key, x.tags, x.data, x.metadata, x.occurred_at, x.version
             FROM riverbus_event x
             WHERE x.tags @> q.tags AND (cardinality(q.types) = 0 OR x.type = ANY (q.types)) AND x.global_sequence > $3
             OFFSET 0) x
           ORDER BY x.global_sequence LIMIT $4::bigint) x
) m
ORDER BY m.global_sequence
LIMIT $4::bigint`

// readKeyQuery returns the events with key $1 above $2 in sequence order,
// through the (key, global_sequence) index; when $3 has items, only those
// matching one of them ($3 holds every item, with or without tags).
const readKeyQuery = `
SELECT e.global_sequence, e.event_id, e.type, e.key, e.tags, e.data, e.metadata, e.occurred_at, e.version
FROM riverbus_event e
WHERE e.key = $1 AND e.global_sequence > $2
  AND (jsonb_array_length($3::jsonb) = 0 OR EXISTS (
    SELECT FROM (SELECT * FROM jsonb_to_recordset($3::jsonb) AS q(types text[], tags text[]) LIMIT jsonb_array_length($3::jsonb)) q
    WHERE e.tags @> q.tags AND (cardinality(q.types) = 0 OR e.type = ANY (q.types))))
ORDER BY e.global_sequence
LIMIT $4::bigint`

// readAllQuery returns every event above $1 in sequence order.
const readAllQuery = `
SELECT e.global_sequence, e.event_id, e.type, e.key, e.tags, e.data, e.metadata, e.occurred_at, e.version
FROM riverbus_event e
WHERE e.global_sequence > $1
ORDER BY e.global_sequence
LIMIT $2::bigint`

// recordCommandQuery records the command of the current transaction; a
// trigger sets transaction_id to pg_current_xact_id(), the id the
// transaction's events carry, whatever an inserter supplies.
const recordCommandQuery = `
INSERT INTO riverbus_command (type, data, metadata)
VALUES ($1, $2::text::jsonb, $3::text::jsonb)`

// skipNotifyQuery is SET LOCAL riverbus.notify = off, as a function call so
// that it runs in every query execution mode; the trigger
// riverbus_event_notify reads the setting (migration 010).
const skipNotifyQuery = `SELECT set_config('riverbus.notify', 'off', true)`

// wakeQuery is the fan-out's wake-up that Append sends after its COMMIT,
// as a transaction of its own committed asynchronously (a lost one costs
// the poll interval, as a missed NOTIFY does). It sends it unless the
// session switched the wake-up off (riverbus.notify, as the trigger
// riverbus_event_notify of migration 010 reads it).
const wakeQuery = `SELECT set_config('synchronous_commit', 'off', true),
	pg_notify('riverbus_event', '') WHERE coalesce(nullif(current_setting('riverbus.notify', true), '')::boolean, true)`
