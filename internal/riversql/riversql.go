// Package riversql is the one place riverbus writes River's tables and
// speaks River's wake-up protocol itself, rather than through River's
// client: the fan-out inserts its jobs in bulk (COPY, or one SQL statement
// on the plain path), dead-letter retries re-insert jobs and wake River's
// producers, pools create their River queue. Each is written here once, as
// River RiverVersion does it, and riversql_test.go checks it against that
// River's own client: the same job row, the same notification, the same
// queue row, and the River version in go.mod.
//
// The lane release (riverbus_release_lanes, in migrations/sql/current)
// sends the insert notification from SQL too, and the shipped migrations
// that defined it before keep their own copies; the tests pin each to
// NotifyInsert's topic and payload.
//
// Rules that SQL holds as well as Go are written here once for Go and
// pinned to their SQL by tests: PoolName (riverbus_pool's CHECK) and
// EventEnvelope (riverbus_event_envelope).
package riversql

import (
	"context"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"
)

// RiverVersion is the River release (github.com/riverqueue/river) this
// package was written and checked against. A test fails when go.mod names
// another one, saying what to check again.
const RiverVersion = "v0.51.2"

// NotifyInsert is River's insert notification as an SQL expression, for
// the queue in the column (or alias) named queue: pg_notify on the topic
// river_insert, prefixed with the current schema and a dot when there is
// one (the channel River's producers LISTEN on), with the payload
// {"queue": name}. Producers of the queue then fetch at once instead of at
// their next poll. Notifications are delivered on commit.
const NotifyInsert = `pg_notify(coalesce(current_schema() || '.', '') || 'river_insert', json_build_object('queue', queue)::text)`

// NotifyInsertQueues sends NotifyInsert once for each of the queues $1
// (text[]) and returns how many it sent.
const NotifyInsertQueues = `SELECT count(` + NotifyInsert + `) FROM unnest($1::text[]) AS q(queue)`

// PoolNamePattern is the rule for a pool's name, which is the River job
// kind of its jobs: River's rule for a kind (at least two characters),
// narrowed to what is safe in SQL, URLs, header values and the UI: 2 to
// 100 letters, digits, _ . - or :, the first not . - or :. riverbus_pool's
// CHECK riverbus_pool_name_valid (migration 005) is the same expression;
// TestPoolNameIsTheCheck keeps them so.
const PoolNamePattern = `^[A-Za-z0-9_][A-Za-z0-9_.:-]{1,99}$`

// PoolName matches the names PoolNamePattern allows.
var PoolName = regexp.MustCompile(PoolNamePattern)

// EventEnvelope is the envelope of the event whose row is e, as
// riverbus_event holds it: an outbox.Event. Workers get it for each event of
// their jobs (a job's args may carry only a reference to it: EventArgs), and
// a webhook sends it, rebuilt from the log, whatever a job row says. The
// database's riverbus_event_envelope builds the same object, for the retry
// of an undeliverable event's dead letter: TestEnvelopesAgree keeps the two
// and outbox.Event in step.
const EventEnvelope = `jsonb_build_object('global_sequence', e.global_sequence, 'event_id', e.event_id, 'type', e.type,
	'key', e.key, 'tags', to_jsonb(e.tags), 'data', e.data, 'metadata', e.metadata, 'occurred_at', e.occurred_at,
	'version', e.version)`

// PayloadInlineMax is the most bytes of data and metadata, as jsonb, that
// an event's job carries in its args. A bigger event's job carries a
// reference instead (EventArgs), and the worker reads the payload from the
// log when it works the job (ResolvePayloads).
//
// River fetches a queue's jobs, args and all, in one statement with a fixed
// timeout, as many as the queue has free workers; it reads them again when
// it reschedules, rescues or retries them, and River UI lists them. Events
// of tens of megabytes in the args made those statements time out, and the
// jobs stalled; a reference keeps every job row a few hundred bytes, and
// each big payload crosses the network once, to the handler that needs it.
const PayloadInlineMax = 64 << 10

// PayloadBig is whether the payload of the event e takes more than
// PayloadInlineMax bytes. Its stored size (what pg_column_size reports:
// compressed, for a compressed value) decides when it is over the limit, or
// so small that no compression could make it so (neither pglz nor lz4
// shrinks a value more than 256 times); otherwise the payload's size as an
// uncompressed jsonb is measured, so that a value that compresses well
// cannot slip a huge payload into a job.
const PayloadBig = `CASE WHEN pg_column_size(e.data) + pg_column_size(e.metadata) > ` + payloadInlineMaxText + ` THEN true
		WHEN pg_column_size(e.data) + pg_column_size(e.metadata) <= ` + payloadInlineMaxText + ` / 256 THEN false
		ELSE pg_column_size(jsonb_build_array(e.data, e.metadata)) > ` + payloadInlineMaxText + ` END`

const payloadInlineMaxText = "65536" // PayloadInlineMax; riversql_test.go checks that they agree

// EventArgs is the args of a pool job of one event, a workers.Args
// without late, built by the database from the event's row e: the
// fan-out's jobs and the rebuilt dead letters (package deadletters) are
// built with it, so an event's payload never has to leave the database.
// An event whose payload takes more than PayloadInlineMax bytes gets a
// bustype.EventJobRef instead: the envelope without data and metadata,
// and "payload_in_log": true. envelope_test.go in package fanout pins both
// to the bustype types.
const EventArgs = `CASE WHEN ` + PayloadBig + `
	THEN jsonb_build_object('global_sequence', e.global_sequence, 'event_id', e.event_id, 'type', e.type,
		'key', e.key, 'tags', to_jsonb(e.tags), 'occurred_at', e.occurred_at, 'version', e.version, 'payload_in_log', true)
	ELSE ` + EventEnvelope + ` END`

// EventPayload returns the data and metadata, as text, of the event whose
// sequence and event id are $1 and $2: the payload a job's reference names
// (bustype.EventJobRef); no row when the log no longer holds the event, or
// holds it under another id. One event and plain columns: the text of a big
// payload is the cost of the read (jsonb's output, seconds for tens of
// megabytes on a busy server), and an array around it would be written out
// and parsed once more, escaped, on each side.
const EventPayload = `SELECT e.data::text, e.metadata::text FROM riverbus_event e WHERE e.global_sequence = $1 AND e.event_id = $2`

// JobColumnList is the columns of river_job that riverbus sets when it
// inserts a job, in the order of JobRow's values: River's own bulk insert's
// (JobInsertFastMany) but created_at and scheduled_at, left to their
// default, the database's now() (by which River's producers fetch, not a
// host's clock), and unique_key and unique_states (riverbus's jobs are not
// unique jobs).
const JobColumnList = `args, kind, max_attempts, metadata, priority, queue, state, tags`

// JobColumns is JobColumnList as a slice, for COPY.
var JobColumns = strings.Split(JobColumnList, ", ")

// JobRow is a job as riverbus inserts it: the values of JobColumns.
// Metadata nil is stored as {}, Tags nil as no tags.
type JobRow struct {
	Args        []byte
	Kind        string
	MaxAttempts int16
	Metadata    []byte
	Priority    int16
	Queue       string
	// State is the job's state: available, or pending for an ordered
	// pool's job waiting for its lane.
	State string
	Tags  []string
}

func (r *JobRow) values() []any {
	metadata, tags := r.Metadata, r.Tags
	if metadata == nil {
		metadata = []byte("{}")
	}
	if tags == nil {
		tags = []string{}
	}
	return []any{r.Args, r.Kind, r.MaxAttempts, metadata, r.Priority, r.Queue, r.State, tags}
}

// CopyJobs inserts n jobs into river_job with COPY, as River's
// InsertManyFast does; row returns the i-th. It returns how many it
// inserted. It sends no notification: see NotifyInsertQueues.
func CopyJobs(ctx context.Context, tx pgx.Tx, n int, row func(i int) JobRow) (int64, error) {
	return tx.CopyFrom(ctx, pgx.Identifier{"river_job"}, JobColumns, pgx.CopyFromSlice(n, func(i int) ([]any, error) {
		r := row(i)
		return r.values(), nil
	}))
}

// JobRetryDiscarded does to the discarded jobs $1 (bigint[]) what River's
// JobRetry does to a discarded job: available again, one more attempt if
// all were used, not finalized, no pending cancellation; attempt and errors
// are kept, as River keeps them. Instead of now() for all, scheduled_at is
// now() plus the job's rank in $2 (int[]) in microseconds, so that River,
// which fetches by priority, scheduled_at and id, works them in the order
// given. It returns the ids of the jobs it put back to work.
const JobRetryDiscarded = `UPDATE river_job j
SET state = 'available',
	max_attempts = CASE WHEN j.attempt = j.max_attempts THEN j.max_attempts + 1 ELSE j.max_attempts END,
	finalized_at = NULL,
	metadata = j.metadata - 'cancel_attempted_at',
	scheduled_at = now() + u.rank * interval '1 microsecond'
FROM unnest($1::bigint[], $2::int[]) AS u(id, rank)
WHERE j.id = u.id AND j.state = 'discarded'
RETURNING j.id`

// QueueEnsure creates River's row for the queue $1 when it has none, as
// River's producer does when it starts (QueueCreateOrSetUpdatedAt), but
// leaves an existing row alone. River pauses and resumes only queues that
// have a row.
const QueueEnsure = `INSERT INTO river_queue (name, created_at, metadata, updated_at) VALUES ($1, now(), '{}', now())
ON CONFLICT (name) DO NOTHING`
