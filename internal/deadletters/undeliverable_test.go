package deadletters_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/fanout"
	"github.com/riverbus/riverbus/internal/deadletters"
	"github.com/riverbus/riverbus/internal/jobtest"
	"github.com/riverbus/riverbus/internal/pools"
	"github.com/riverbus/riverbus/outbox"
	"github.com/riverbus/riverbus/workers"
)

// appendDeepEvent appends, by SQL, an event whose data nests deeper than
// encoding/json accepts, and returns its sequence.
func appendDeepEvent(t *testing.T, db *pgxpool.Pool) int64 {
	t.Helper()
	ctx := context.Background()
	conn, err := db.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, `SET max_stack_depth = '7MB'`)
	require.NoError(t, err)
	var seq int64
	require.NoError(t, conn.QueryRow(ctx,
		`INSERT INTO riverbus_event (type, key, data) VALUES ('deep', 'k', $1::text::jsonb) RETURNING global_sequence`,
		strings.Repeat("[", 20_000)+strings.Repeat("]", 20_000)).Scan(&seq))
	_, err = conn.Exec(ctx, `RESET max_stack_depth`)
	require.NoError(t, err)
	return seq
}

func fanOut(t *testing.T, db *pgxpool.Pool) {
	t.Helper()
	f, err := fanout.New(db, &fanout.Config{Logger: jobtest.DiscardLogger})
	require.NoError(t, err)
	for {
		res, err := f.Pass(context.Background())
		require.NoError(t, err)
		if !res.More {
			break
		}
	}
}

// An event the fan-out could not turn into a job is a dead letter with the
// reason; retried before its row is repaired it stays; retried after, it
// is delivered with its real envelope, rebuilt from riverbus_event, whether
// River's cleaner deleted the job row or not. Purging works as for any dead
// letter.
func TestRetryUndeliverableAfterRepair(t *testing.T) {
	t.Parallel()
	ctx, bundle := setup(t)
	_, _, err := pools.Create(ctx, bundle.db, bustype.PoolParams{Name: "invoices"})
	require.NoError(t, err)
	kept := appendDeepEvent(t, bundle.db)
	cleaned := appendDeepEvent(t, bundle.db)
	purged := appendDeepEvent(t, bundle.db)
	fanOut(t, bundle.db)

	dls, err := deadletters.List(ctx, bundle.db, bustype.DeadLetterListParams{Pool: "invoices"})
	require.NoError(t, err)
	require.Len(t, dls, 3)
	bySeq := map[int64]bustype.DeadLetter{}
	for _, d := range dls {
		require.Contains(t, d.LastError, "exceeded max depth")
		require.Equal(t, "deep", d.EventType)
		require.Equal(t, "k", d.EventKey)
		require.Less(t, len(d.Args), 1000, "the stub carries no payload")
		bySeq[d.GlobalSequence] = d
	}

	// Not repaired yet: it stays.
	res, err := deadletters.Retry(ctx, bundle.db, bySeq[kept].JobID)
	require.ErrorIs(t, err, bustype.ErrUndeliverable)
	require.Equal(t, bustype.RetryUndeliverable, res.Action)
	require.Contains(t, res.Reason, "exceeded max depth")
	dls, err = deadletters.List(ctx, bundle.db, bustype.DeadLetterListParams{Pool: "invoices"})
	require.NoError(t, err)
	require.Len(t, dls, 3)

	// Repaired, River's cleaner having deleted one job row.
	_, err = bundle.db.Exec(ctx, `UPDATE riverbus_event SET data = jsonb_build_object('fixed', global_sequence) WHERE global_sequence IN ($1, $2)`, kept, cleaned)
	require.NoError(t, err)
	_, err = bundle.db.Exec(ctx, `DELETE FROM river_job WHERE id = $1`, bySeq[cleaned].JobID)
	require.NoError(t, err)
	all, err := deadletters.RetryPool(ctx, bundle.db, "invoices")
	require.NoError(t, err)
	actions := map[int64]bustype.RetryAction{}
	for _, r := range all {
		actions[r.DeadJobID] = r.Action
	}
	require.Equal(t, map[int64]bustype.RetryAction{
		bySeq[kept].JobID:    bustype.RetryRequeued,
		bySeq[cleaned].JobID: bustype.RetryReinserted,
		bySeq[purged].JobID:  bustype.RetryUndeliverable,
	}, actions)

	rows, err := bundle.db.Query(ctx, `SELECT state::text, args FROM river_job WHERE kind = 'invoices' AND state = 'available' ORDER BY (args->>'global_sequence')::bigint`)
	require.NoError(t, err)
	var got []workers.Args
	for rows.Next() {
		var state string
		var raw []byte
		require.NoError(t, rows.Scan(&state, &raw))
		require.NotContains(t, string(raw), "undeliverable")
		var a workers.Args
		require.NoError(t, json.Unmarshal(raw, &a))
		got = append(got, a)
	}
	require.NoError(t, rows.Err())
	require.Len(t, got, 2)
	for i, seq := range []int64{kept, cleaned} {
		require.Equal(t, seq, got[i].GlobalSequence)
		require.Equal(t, "deep", got[i].Type)
		require.JSONEq(t, `{"fixed": `+jsonInt(seq)+`}`, string(got[i].Data))
		require.NotZero(t, got[i].EventID)
	}

	// The one never repaired is purged.
	require.NoError(t, deadletters.Purge(ctx, bundle.db, bySeq[purged].JobID))
	dls, err = deadletters.List(ctx, bundle.db, bustype.DeadLetterListParams{Pool: "invoices"})
	require.NoError(t, err)
	require.Empty(t, dls)
}

func jsonInt(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// Retried outside riverbus (River UI's button, River's JobRetry) after the
// event row is repaired, a dead letter of an undeliverable event runs with
// its real envelope too, the same the fan-out builds, never with the stub.
func TestRiverRetryOfUndeliverableRebuildsEnvelope(t *testing.T) {
	t.Parallel()
	ctx, bundle := setup(t)
	_, _, err := pools.Create(ctx, bundle.db, bustype.PoolParams{Name: "invoices"})
	require.NoError(t, err)
	seq := appendDeepEvent(t, bundle.db)
	fanOut(t, bundle.db)
	dls, err := deadletters.List(ctx, bundle.db, bustype.DeadLetterListParams{Pool: "invoices"})
	require.NoError(t, err)
	require.Len(t, dls, 1)

	_, err = bundle.db.Exec(ctx, `UPDATE riverbus_event SET data = '{"fixed": true}', metadata = '{"m": [1]}' WHERE global_sequence = $1`, seq)
	require.NoError(t, err)
	job, err := bundle.client.JobRetry(ctx, dls[0].JobID)
	require.NoError(t, err)
	require.Equal(t, rivertype.JobStateAvailable, job.State)

	events, err := outbox.Read(ctx, bundle.db, outbox.ReadParams{})
	require.NoError(t, err)
	require.Len(t, events, 1)
	require.NotContains(t, string(job.EncodedArgs), "undeliverable")
	var got workers.Args
	require.NoError(t, json.Unmarshal(job.EncodedArgs, &got))
	require.True(t, got.OccurredAt.Equal(events[0].OccurredAt))
	got.OccurredAt = events[0].OccurredAt
	require.JSONEq(t, string(events[0].Data), string(got.Data))
	require.JSONEq(t, string(events[0].Metadata), string(got.Metadata))
	got.Data, got.Metadata = events[0].Data, events[0].Metadata
	require.Equal(t, workers.Args{Event: events[0]}, got)
}

// A retry from River UI or River's client of an undeliverable event nobody
// repaired is refused: the job stays a dead letter (still listed, still
// holding a block-mode key), with the refusal in its errors, instead of
// running a job no worker can decode.
func TestRiverRetryOfUnrepairedUndeliverableIsRefused(t *testing.T) {
	t.Parallel()
	ctx, bundle := setup(t)
	_, _, err := pools.Create(ctx, bundle.db, bustype.PoolParams{Name: "invoices", Ordering: bustype.OrderingKey, OnDeadLetter: bustype.DeadLetterBlock})
	require.NoError(t, err)
	appendDeepEvent(t, bundle.db)
	fanOut(t, bundle.db)
	dls, err := deadletters.List(ctx, bundle.db, bustype.DeadLetterListParams{Pool: "invoices"})
	require.NoError(t, err)
	require.Len(t, dls, 1)

	job, err := bundle.client.JobRetry(ctx, dls[0].JobID)
	require.NoError(t, err)
	require.Equal(t, rivertype.JobStateDiscarded, job.State)
	require.Contains(t, string(job.EncodedArgs), "undeliverable")
	require.Contains(t, job.Errors[len(job.Errors)-1].Error, "retry refused")
	after, err := deadletters.List(ctx, bundle.db, bustype.DeadLetterListParams{Pool: "invoices"})
	require.NoError(t, err)
	require.Len(t, after, 1, "still a dead letter")
	require.Equal(t, dls[0].JobID, after[0].JobID)
}

// A transaction group with an undeliverable event is one dead letter naming
// the group's events; repaired and retried, it runs as the whole group.
func TestRetryUndeliverableGroup(t *testing.T) {
	t.Parallel()
	ctx, bundle := setup(t)
	_, _, err := pools.Create(ctx, bundle.db, bustype.PoolParams{Name: "ledger", Grouping: bustype.GroupTransaction})
	require.NoError(t, err)
	conn, err := bundle.db.Acquire(ctx)
	require.NoError(t, err)
	var first, deep int64
	_, err = conn.Exec(ctx, `SET max_stack_depth = '7MB'`)
	require.NoError(t, err)
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, tx.QueryRow(ctx, `INSERT INTO riverbus_event (type, key, data) VALUES ('ok', 'k', '{"n": 1}') RETURNING global_sequence`).Scan(&first))
	require.NoError(t, tx.QueryRow(ctx, `INSERT INTO riverbus_event (type, key, data) VALUES ('deep', 'k', $1::text::jsonb) RETURNING global_sequence`,
		strings.Repeat("[", 20_000)+strings.Repeat("]", 20_000)).Scan(&deep))
	require.NoError(t, tx.Commit(ctx))
	_, err = conn.Exec(ctx, `RESET max_stack_depth`)
	require.NoError(t, err)
	conn.Release()
	fanOut(t, bundle.db)

	dls, err := deadletters.List(ctx, bundle.db, bustype.DeadLetterListParams{Pool: "ledger"})
	require.NoError(t, err)
	// The event Go cannot encode is a part of its own (the group's second):
	// only that part is a dead letter; the first part is delivered.
	require.Len(t, dls, 1)
	require.Equal(t, deep, dls[0].GlobalSequence)
	require.Contains(t, dls[0].LastError, "too deep")
	var delivered []byte
	require.NoError(t, bundle.db.QueryRow(ctx, `SELECT args FROM river_job WHERE kind = 'ledger' AND state = 'available'`).Scan(&delivered))
	var firstPart workers.GroupArgs
	require.NoError(t, json.Unmarshal(delivered, &firstPart))
	require.Equal(t, first, firstPart.GlobalSequence)
	require.Len(t, firstPart.Events, 1)

	_, err = bundle.db.Exec(ctx, `UPDATE riverbus_event SET data = '{"fixed": true}' WHERE global_sequence = $1`, deep)
	require.NoError(t, err)
	res, err := deadletters.Retry(ctx, bundle.db, dls[0].JobID)
	require.NoError(t, err)
	require.Equal(t, bustype.RetryRequeued, res.Action)
	var raw []byte
	require.NoError(t, bundle.db.QueryRow(ctx, `SELECT args FROM river_job WHERE id = $1`, res.JobID).Scan(&raw))
	var g workers.GroupArgs
	require.NoError(t, json.Unmarshal(raw, &g))
	require.Equal(t, deep, g.GlobalSequence)
	require.Equal(t, firstPart.TransactionID, g.TransactionID)
	require.NotEmpty(t, g.TransactionID)
	require.Len(t, g.Events, 1)
	require.Equal(t, deep, g.Events[0].GlobalSequence)
	require.JSONEq(t, `{"fixed": true}`, string(g.Events[0].Data))
	require.Equal(t, 2, g.Part)
	require.Equal(t, 2, g.Parts)
}
