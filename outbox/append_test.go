package outbox_test

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/outbox"
)

func TestAppendTxStoresEnvelope(t *testing.T) {
	t.Parallel()
	ctx, bundle := setup(t)

	id := uuid.MustParse("0190a6c4-5b1e-7c3d-8e2f-0123456789ab")
	at := time.Date(2025, 3, 1, 12, 30, 45, 123456789, time.UTC)
	tx, err := bundle.db.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	var now time.Time
	require.NoError(t, tx.QueryRow(ctx, "SELECT now()").Scan(&now))
	appended, err := outbox.AppendTx(ctx, tx,
		outbox.Event{Type: "CourseDefined", Key: "c1", Tags: []string{"course=c1", "term=2025=spring"}, Data: json.RawMessage(`{"capacity": 30, "title": "<Go & SQL>", "x": null}`), Metadata: json.RawMessage(`{"user": "ann"}`), EventID: id, OccurredAt: at},
		outbox.Event{Type: "Nothing", Data: json.RawMessage(`null`)},
		outbox.Event{Type: "Scalar", Data: json.RawMessage(` 42 `), GlobalSequence: 999},
	)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))

	require.Len(t, appended, 3)
	require.Equal(t, outbox.Appended{GlobalSequence: 1, EventID: id}, appended[0])
	require.Equal(t, int64(2), appended[1].GlobalSequence)
	require.Equal(t, int64(3), appended[2].GlobalSequence)
	require.Equal(t, uuid.Version(7), appended[1].EventID.Version())
	require.Equal(t, uuid.Version(7), appended[2].EventID.Version())
	require.NotEqual(t, appended[1].EventID, appended[2].EventID)

	events, err := outbox.Read(ctx, bundle.db, outbox.ReadParams{})
	require.NoError(t, err)
	require.Len(t, events, 3)

	e := events[0]
	require.Equal(t, int64(1), e.GlobalSequence)
	require.Equal(t, id, e.EventID)
	require.Equal(t, "CourseDefined", e.Type)
	require.Equal(t, "c1", e.Key)
	require.Equal(t, []string{"course=c1", "term=2025=spring"}, e.Tags)
	require.JSONEq(t, `{"capacity": 30, "title": "<Go & SQL>", "x": null}`, string(e.Data))
	require.JSONEq(t, `{"user": "ann"}`, string(e.Metadata))
	require.True(t, at.Round(time.Microsecond).Equal(e.OccurredAt), "occurred_at %s", e.OccurredAt)

	// Zero OccurredAt is the database's now(), zero Metadata {}, JSON null
	// data stays JSON null.
	e = events[1]
	require.Equal(t, appended[1].EventID, e.EventID)
	require.Equal(t, "Nothing", e.Type)
	require.Equal(t, "", e.Key)
	require.Empty(t, e.Tags)
	require.Equal(t, "null", string(e.Data))
	require.Equal(t, "{}", string(e.Metadata))
	require.True(t, now.Equal(e.OccurredAt), "occurred_at %s, now %s", e.OccurredAt, now)

	require.Equal(t, int64(3), events[2].GlobalSequence)
	require.Equal(t, "42", string(events[2].Data))

	// The envelope's JSON names are a contract.
	b, err := json.Marshal(outbox.Event{GlobalSequence: 7, EventID: id, Type: "T", Key: "k", Tags: []string{"a=b"}, Data: json.RawMessage(`{}`), Metadata: json.RawMessage(`{}`), OccurredAt: at, Version: 2})
	require.NoError(t, err)
	require.JSONEq(t, `{"global_sequence":7,"event_id":"0190a6c4-5b1e-7c3d-8e2f-0123456789ab","type":"T","key":"k","tags":["a=b"],"data":{},"metadata":{},"occurred_at":"2025-03-01T12:30:45.123456789Z","version":2}`, string(b))
}

func TestAppendCommitsItsOwnTransaction(t *testing.T) {
	t.Parallel()
	ctx, bundle := setup(t)

	appended, err := outbox.Append(ctx, bundle.db, event("A"), event("B"))
	require.NoError(t, err)
	require.Equal(t, []int64{1, 2}, []int64{appended[0].GlobalSequence, appended[1].GlobalSequence})

	// Append on a connection, not a pool.
	conn, err := bundle.db.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	appended, err = outbox.Append(ctx, conn.Conn(), event("C"))
	require.NoError(t, err)
	require.Equal(t, int64(3), appended[0].GlobalSequence)
	require.Equal(t, 3, countEvents(t, bundle.db))
}

func TestAppendTxRollbackLeavesHole(t *testing.T) {
	t.Parallel()
	ctx, bundle := setup(t)

	tx, err := bundle.db.Begin(ctx)
	require.NoError(t, err)
	rolledBack, err := outbox.AppendTx(ctx, tx, event("A"), event("B"))
	require.NoError(t, err)
	require.Equal(t, int64(1), rolledBack[0].GlobalSequence)
	require.Equal(t, int64(2), rolledBack[1].GlobalSequence)
	require.NoError(t, tx.Rollback(ctx))
	require.Equal(t, 0, countEvents(t, bundle.db))

	appended, err := outbox.Append(ctx, bundle.db, event("C"))
	require.NoError(t, err)
	require.Equal(t, int64(3), appended[0].GlobalSequence, "the rolled-back sequences 1 and 2 stay a hole")

	events, err := outbox.Read(ctx, bundle.db, outbox.ReadParams{})
	require.NoError(t, err)
	require.Equal(t, []int64{3}, sequences(events))
	require.Equal(t, appended[0].EventID, events[0].EventID)
}

func TestAppendDuplicateEventID(t *testing.T) {
	t.Parallel()
	ctx, bundle := setup(t)

	id := uuid.MustParse("0190a6c4-5b1e-7c3d-8e2f-00000000000a")
	e := event("A")
	e.EventID = id
	_, err := outbox.Append(ctx, bundle.db, e)
	require.NoError(t, err)

	_, err = outbox.Append(ctx, bundle.db, event("B"), e)
	require.ErrorIs(t, err, outbox.ErrDuplicate)
	var dup *outbox.DuplicateError
	require.True(t, errors.As(err, &dup))
	require.Equal(t, id, dup.EventID)
	require.Nil(t, dup.Query)
	require.Equal(t, "append events: outbox: duplicate: event id 0190a6c4-5b1e-7c3d-8e2f-00000000000a already exists", err.Error())
	require.Equal(t, 1, countEvents(t, bundle.db))
}

// Every insert path goes through the trigger, which overwrites whatever the
// inserter put in global_sequence and transaction_id.
func TestTriggerAssignsSequenceAndTransaction(t *testing.T) {
	t.Parallel()
	ctx, bundle := setup(t)

	tx, err := bundle.db.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	var xid uint64
	require.NoError(t, tx.QueryRow(ctx, "SELECT pg_current_xact_id()").Scan(&xid))

	_, err = tx.Exec(ctx, `INSERT INTO riverbus_event (type, key, tags, data, metadata) VALUES ('Plain', 'k', '{a=1}', '{"p":1}', '{}')`)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `INSERT INTO riverbus_event (global_sequence, transaction_id, type, key, data) VALUES (999, '42', 'PlainBogus', 'k', '{"p":2}')`)
	require.NoError(t, err)

	n, err := tx.CopyFrom(ctx, pgx.Identifier{"riverbus_event"}, []string{"type", "key", "data"}, pgx.CopyFromRows([][]any{
		{"Copied", "k1", json.RawMessage(`{"c":1}`)},
		{"Copied", "k2", json.RawMessage(`{"c":2}`)},
	}))
	require.NoError(t, err)
	require.Equal(t, int64(2), n)
	n, err = tx.CopyFrom(ctx, pgx.Identifier{"riverbus_event"}, []string{"global_sequence", "transaction_id", "type", "key", "data"}, pgx.CopyFromRows([][]any{
		{int64(1), uint64(1), "CopiedBogus", "k3", json.RawMessage(`{"c":3}`)},
		{int64(-5), uint64(123456789), "CopiedBogus", "k4", json.RawMessage(`{"c":4}`)},
	}))
	require.NoError(t, err)
	require.Equal(t, int64(2), n)
	require.NoError(t, tx.Commit(ctx))

	type row struct {
		seq  int64
		xid  uint64
		typ  string
		key  string
		data string
	}
	rows, err := bundle.db.Query(ctx, "SELECT global_sequence, transaction_id, type, key, data::text FROM riverbus_event ORDER BY global_sequence")
	require.NoError(t, err)
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
		var x row
		return x, r.Scan(&x.seq, &x.xid, &x.typ, &x.key, &x.data)
	})
	require.NoError(t, err)
	require.Equal(t, []row{
		{1, xid, "Plain", "k", `{"p": 1}`},
		{2, xid, "PlainBogus", "k", `{"p": 2}`},
		{3, xid, "Copied", "k1", `{"c": 1}`},
		{4, xid, "Copied", "k2", `{"c": 2}`},
		{5, xid, "CopiedBogus", "k3", `{"c": 3}`},
		{6, xid, "CopiedBogus", "k4", `{"c": 4}`},
	}, got)
}

// Many writers append concurrently, each in several statements: every event
// gets a unique sequence, increasing within each transaction in append
// order, and carries its writer's transaction id.
func TestAppendTxConcurrentWriters(t *testing.T) {
	t.Parallel()
	ctx, bundle := setup(t)

	const writers, total = 16, 1000
	type writer struct {
		xid  uint64
		seqs []int64
		err  error
	}
	results := make([]writer, writers)
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	for w := range writers {
		n := total / writers
		if w < total%writers {
			n++
		}
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			r := &results[w]
			tx, err := bundle.db.Begin(ctx)
			ready.Done()
			if err != nil {
				r.err = err
				return
			}
			defer tx.Rollback(ctx) //nolint:errcheck
			<-start
			if r.err = tx.QueryRow(ctx, "SELECT pg_current_xact_id()").Scan(&r.xid); r.err != nil {
				return
			}
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for n > 0 {
				size := min(n, 1+rng.IntN(12))
				events := make([]outbox.Event, size)
				for i := range events {
					events[i] = event("Written", "writer="+string(rune('a'+w)))
				}
				appended, err := outbox.AppendTx(ctx, tx, events...)
				if err != nil {
					r.err = err
					return
				}
				for _, a := range appended {
					r.seqs = append(r.seqs, a.GlobalSequence)
				}
				n -= size
			}
			r.err = tx.Commit(ctx)
		}()
	}
	ready.Wait()
	close(start)
	done.Wait()

	owner := make(map[int64]uint64)
	for w, r := range results {
		require.NoError(t, r.err, "writer %d", w)
		require.True(t, slices.IsSorted(r.seqs), "writer %d: sequences not increasing in append order: %v", w, r.seqs)
		for _, s := range r.seqs {
			_, dup := owner[s]
			require.False(t, dup, "sequence %d assigned twice", s)
			owner[s] = r.xid
		}
	}
	require.Len(t, owner, total)
	for s := int64(1); s <= total; s++ {
		require.Contains(t, owner, s)
	}

	rows, err := bundle.db.Query(ctx, "SELECT global_sequence, transaction_id FROM riverbus_event")
	require.NoError(t, err)
	stored := make(map[int64]uint64)
	var seq int64
	var xid uint64
	_, err = pgx.ForEachRow(rows, []any{&seq, &xid}, func() error {
		stored[seq] = xid
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, owner, stored)
}
