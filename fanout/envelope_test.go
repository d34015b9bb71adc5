package fanout_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/fanout"
	"github.com/riverbus/riverbus/internal/deadletters"
	"github.com/riverbus/riverbus/internal/testwait"
	"github.com/riverbus/riverbus/outbox"
	"github.com/riverbus/riverbus/workers"
)

// Every job the fan-out writes decodes into its bustype type, strictly (no
// unknown key), with every field set as the events say, and has exactly
// the keys of the type's own encoding: built in SQL on the plain path and
// on the general path, for every kind of pool and every shape (one event,
// a transaction group cut into parts, late, the stub of a unit that
// cannot be a job), and once more after the stubs are retried, rebuilt by
// dlq retry and by migration 007's trigger (as River UI's retry runs it). So the SQL and the Go types cannot drift apart.
func TestJobArgsAreTheBustypeTypes(t *testing.T) {
	restore := fanout.SetGroupPartBounds(3, 16<<20)
	defer restore()
	ctx := context.Background()
	b := setup(t)
	kinds := map[string]bustype.PoolParams{
		"plain":          {},
		"typed":          {EventTypes: []string{"order.placed", "deep"}},
		"tagged":         {Tags: []string{"tenant=acme"}},
		"keyed":          {Ordering: bustype.OrderingKey, OnDeadLetter: bustype.DeadLetterRelease},
		"global":         {Ordering: bustype.OrderingGlobal, OnDeadLetter: bustype.DeadLetterRelease},
		"grouped":        {Grouping: bustype.GroupTransaction},
		"grouped-keyed":  {Grouping: bustype.GroupTransaction, Ordering: bustype.OrderingKey, OnDeadLetter: bustype.DeadLetterRelease},
		"grouped-global": {Grouping: bustype.GroupTransaction, Ordering: bustype.OrderingGlobal, OnDeadLetter: bustype.DeadLetterRelease},
	}
	plainPools := []string{"plain", "typed", "tagged"}
	for name, p := range kinds {
		p.Name = name
		createPool(t, b.db, p)
	}
	f := newFanout(t, b.db, fanout.Config{GapTimeout: 200 * time.Millisecond})

	// Every event has every field set: a key, tags, data and metadata.
	// The special ones (late, or too deep for Go) match every pool.
	n := 0
	appendIn := func(tx pgx.Tx, special, deep bool) int64 {
		t.Helper()
		n++
		typ, data := []string{"order.placed", "order.paid"}[n%2], fmt.Sprintf(`{"n": %d, "s": "naïve ✓ <&>"}`, n)
		tags := [][]string{{"tenant=acme", "region=eu"}, {"region=us"}}[n%3%2]
		if special {
			typ, tags = "order.placed", []string{"tenant=acme"}
		}
		if deep {
			_, err := tx.Exec(ctx, `SET LOCAL max_stack_depth = '7MB'`)
			require.NoError(t, err)
			typ, data = "deep", strings.Repeat("[", deepDepth)+strings.Repeat("]", deepDepth)
		}
		var seq int64
		require.NoError(t, tx.QueryRow(ctx, `INSERT INTO riverbus_event (type, key, tags, data, metadata, version)
			VALUES ($1, $2, $3, $4::text::jsonb, '{"trace": "x"}', $5) RETURNING global_sequence`,
			typ, []string{"k1", "k2"}[n%2], tags, data, 1+n%3).Scan(&seq))
		return seq
	}
	appendTx := func(events int, deep bool) {
		t.Helper()
		tx, err := b.db.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		for range events {
			appendIn(tx, deep, false)
		}
		if deep {
			appendIn(tx, true, true)
		}
		require.NoError(t, tx.Commit(ctx))
	}
	maxJobID := func() int64 {
		var id int64
		require.NoError(t, b.db.QueryRow(ctx, `SELECT coalesce(max(id), 0) FROM river_job`).Scan(&id))
		return id
	}

	// The general path: the first look at each pool. A transaction of 8
	// events is a group of 3 parts, and of 2 parts per key.
	appendTx(8, false)
	appendTx(1, false)
	drain(t, f)
	for _, p := range plainPools {
		require.True(t, f.UsesPlainPath(p), p)
	}
	// The plain path.
	sqlFrom := maxJobID()
	appendTx(8, false)
	appendTx(1, false)
	drain(t, f)
	sqlTo := maxJobID()
	for _, p := range plainPools {
		require.True(t, f.UsesPlainPath(p), p)
	}
	// Late: a transaction (one event and one too deep for Go) committed
	// after the horizon skipped its sequences.
	held, err := b.db.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = held.Rollback(ctx) }()
	late := map[int64]bool{appendIn(held, true, false): true, appendIn(held, true, true): true}
	appendTx(1, false)
	testwait.Eventually(t, time.Minute, func() bool {
		pass(t, f)
		return horizon(t, b.db).GapsSkipped > 0
	}, "the held transaction's sequences skipped")
	require.NoError(t, held.Commit(ctx))
	drain(t, f)
	// An event too deep for Go, not late.
	appendTx(1, true)
	drain(t, f)

	check := func(when string, wantStubs bool) {
		t.Helper()
		events := eventRows(t, b)
		for pool, params := range kinds {
			grouped := params.Grouping == bustype.GroupTransaction
			byKey := params.Ordering == bustype.OrderingKey
			rows, err := b.db.Query(ctx, `SELECT id, args FROM river_job WHERE kind = $1 ORDER BY id`, pool)
			require.NoError(t, err)
			seen := map[string]int{} // shapes met
			var got []int64          // sequences delivered or stubbed
			var id int64
			var args []byte
			_, err = pgx.ForEachRow(rows, []any{&id, &args}, func() error {
				what := fmt.Sprintf("%s: pool %s, job %d: %s", when, pool, id, args)
				stub := bytes.Contains(args, []byte(`"undeliverable"`))
				switch {
				case !grouped && !stub:
					j := decodeArgs[workers.Args](t, args, what)
					requireSet(t, reflect.ValueOf(j), what, !j.Late)
					want := events[j.GlobalSequence]
					requireEvent(t, want.Event, j.Event, what)
					require.Equal(t, late[j.GlobalSequence], j.Late, what)
					got = append(got, j.GlobalSequence)
					seen[shape("event", j.Late)]++
					if id > sqlFrom && id <= sqlTo && slices.Contains(plainPools, pool) {
						require.Equal(t, keysOf(t, mustJSON(t, workers.Args{})), keysOf(t, args), what)
						seen["sql"]++
					}
				case !grouped && stub:
					s := decodeArgs[bustype.EventJobStub](t, args, what)
					requireSet(t, reflect.ValueOf(s), what, !s.Late)
					want := events[s.GlobalSequence]
					require.Equal(t, bustype.EventJobStub{EventHead: bustype.EventHead{GlobalSequence: want.GlobalSequence, EventID: want.EventID,
						Type: want.Type, Key: want.Key, Tags: want.Tags, OccurredAt: s.OccurredAt, Version: want.Version}, Late: late[want.GlobalSequence],
						Undeliverable: s.Undeliverable}, s, what)
					require.True(t, want.OccurredAt.Equal(s.OccurredAt), what)
					require.Contains(t, s.Undeliverable, "too deep", what)
					got = append(got, s.GlobalSequence)
					seen[shape("event stub", s.Late)]++
				case grouped && !stub:
					j := decodeArgs[workers.GroupArgs](t, args, what)
					requireSet(t, reflect.ValueOf(j), what, !j.Late)
					first := events[j.Events[0].GlobalSequence]
					require.Equal(t, first.GlobalSequence, j.GlobalSequence, what)
					require.Equal(t, first.txid, j.TransactionID, what)
					require.Equal(t, groupKey(events, first, byKey), j.Key, what)
					require.Equal(t, late[first.GlobalSequence], j.Late, what)
					require.True(t, j.Part >= 1 && j.Part <= j.Parts, what)
					for _, e := range j.Events {
						want := events[e.GlobalSequence]
						requireEvent(t, want.Event, e, what)
						require.Equal(t, j.TransactionID, want.txid, what)
						if byKey {
							require.Equal(t, j.Key, e.Key, what)
						}
						got = append(got, e.GlobalSequence)
					}
					seen[shape("group", j.Late)]++
					if j.Parts > 1 {
						seen["parts"]++
					}
				default:
					s := decodeArgs[bustype.GroupJobStub](t, args, what)
					requireSet(t, reflect.ValueOf(s), what, !s.Late)
					first := events[s.Sequences[0]]
					require.Equal(t, bustype.GroupJobStub{GlobalSequence: first.GlobalSequence, TransactionID: first.txid,
						Key: groupKey(events, first, byKey), Late: late[first.GlobalSequence], Part: s.Part, Parts: s.Parts,
						Sequences: s.Sequences, Undeliverable: s.Undeliverable}, s, what)
					require.True(t, s.Part >= 1 && s.Part <= s.Parts, what)
					require.Contains(t, s.Undeliverable, "too deep", what)
					got = append(got, s.Sequences...)
					seen[shape("group stub", s.Late)]++
				}
				return nil
			})
			require.NoError(t, err)

			// Every matching event, once; every shape of the pool's kind.
			var want []int64
			for seq, e := range events {
				if bustype.FilterMatches(params.EventTypes, params.Tags, e.Type, e.Tags) {
					want = append(want, seq)
				}
			}
			slices.Sort(want)
			slices.Sort(got)
			require.Equal(t, want, got, "%s: pool %s", when, pool)
			shapes := []string{"event", "late event"}
			if grouped {
				shapes = []string{"group", "late group", "parts"}
			}
			if wantStubs {
				shapes = append(shapes, shape(shapes[0]+" stub", false), shape(shapes[0]+" stub", true))
			}
			if slices.Contains(plainPools, pool) {
				shapes = append(shapes, "sql")
			}
			for _, s := range shapes {
				require.Positive(t, seen[s], "%s: pool %s has no job of shape %q: %v", when, pool, s, seen)
			}
			if !wantStubs {
				for _, s := range []string{"event stub", "group stub"} {
					require.Zero(t, seen[shape(s, false)]+seen[shape(s, true)], "%s: pool %s has stubs: %v", when, pool, seen)
				}
			}
		}
	}
	check("fanned out", true)

	// Repaired, the stubs are retried: rebuilt in Go by dlq retry for some
	// pools, in SQL by migration 007's trigger (River UI's retry) for the
	// others.
	_, err = b.db.Exec(ctx, `UPDATE riverbus_event SET data = '{"repaired": true}' WHERE type = 'deep'`)
	require.NoError(t, err)
	for _, pool := range []string{"plain", "typed", "keyed", "grouped"} {
		res, err := deadletters.RetryPool(ctx, b.db, pool)
		require.NoError(t, err)
		require.Len(t, res, 2, pool)
	}
	for _, pool := range []string{"tagged", "global", "grouped-keyed", "grouped-global"} {
		tag, err := b.db.Exec(ctx, `UPDATE river_job SET state = 'available', finalized_at = NULL
			WHERE kind = $1 AND state = 'discarded' AND args ? 'undeliverable'`, pool)
		require.NoError(t, err)
		require.EqualValues(t, 2, tag.RowsAffected(), pool)
	}
	check("retried", false)
}

// groupKey is the key of the group of event e: its first event's (every
// event's, by key). The grouped pools here have no filter.
func groupKey(events map[int64]eventRow, e eventRow, byKey bool) string {
	if byKey {
		return e.Key
	}
	first := e
	for _, o := range events {
		if o.txid == e.txid && o.GlobalSequence < first.GlobalSequence {
			first = o
		}
	}
	return first.Key
}

func shape(name string, late bool) string {
	if late {
		return "late " + name
	}
	return name
}

// eventRow is an event as riverbus_event holds it.
type eventRow struct {
	outbox.Event
	txid string
}

func eventRows(t *testing.T, b *testBundle) map[int64]eventRow {
	t.Helper()
	rows, err := b.db.Query(context.Background(), `SELECT global_sequence, event_id, type, key, tags, data, metadata,
		occurred_at, version, transaction_id::text FROM riverbus_event`)
	require.NoError(t, err)
	out := map[int64]eventRow{}
	var e eventRow
	var id uuid.UUID
	var data, metadata []byte
	_, err = pgx.ForEachRow(rows, []any{&e.GlobalSequence, &id, &e.Type, &e.Key, &e.Tags, &data, &metadata, &e.OccurredAt, &e.Version, &e.txid}, func() error {
		e.EventID, e.Data, e.Metadata = id, bytes.Clone(data), bytes.Clone(metadata)
		out[e.GlobalSequence] = e
		return nil
	})
	require.NoError(t, err)
	return out
}

// decodeArgs decodes a job's args into a T, refusing unknown keys, and
// checks that the args have exactly the keys of T's own encoding of them.
func decodeArgs[T any](t *testing.T, args []byte, what string) T {
	t.Helper()
	var v T
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&v), what)
	require.Equal(t, keysOf(t, mustJSON(t, v)), keysOf(t, args), "%s: keys of the args and of %T", what, v)
	return v
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

// keysOf returns the keys of a JSON object, and of the objects in its
// arrays, as paths.
func keysOf(t *testing.T, b []byte) []string {
	t.Helper()
	var v any
	require.NoError(t, json.Unmarshal(b, &v))
	var keys []string
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				keys = append(keys, prefix+k)
				if k != "data" && k != "metadata" { // the payload's own keys are the event's
					walk(prefix+k+".", x)
				}
			}
		case []any:
			for _, x := range v {
				walk(strings.TrimSuffix(prefix, ".")+"[].", x)
			}
		}
	}
	walk("", v)
	slices.Sort(keys)
	return slices.Compact(keys)
}

// requireEvent checks that an event read from a job's args is the event
// riverbus_event holds.
func requireEvent(t *testing.T, want, got outbox.Event, what string) {
	t.Helper()
	require.True(t, want.OccurredAt.Equal(got.OccurredAt), what)
	require.JSONEq(t, string(want.Data), string(got.Data), what)
	require.JSONEq(t, string(want.Metadata), string(got.Metadata), what)
	got.OccurredAt, got.Data, got.Metadata = want.OccurredAt, want.Data, want.Metadata
	require.Equal(t, want, got, what)
}

// requireSet checks that every field of v is set (a non-empty slice, a
// non-zero value), but Late when lateMayBeZero, recursing into embedded
// structs and slices of structs.
func requireSet(t *testing.T, v reflect.Value, what string, lateMayBeZero bool) {
	t.Helper()
	typ := v.Type()
	for i := range typ.NumField() {
		field, fv := typ.Field(i), v.Field(i)
		name := typ.Name() + "." + field.Name
		switch {
		case field.Name == "Late" && lateMayBeZero:
		case field.Anonymous:
			requireSet(t, fv, what, lateMayBeZero)
		case fv.Kind() == reflect.Slice:
			require.Positive(t, fv.Len(), "%s: %s is empty", what, name)
			if fv.Type().Elem().Kind() == reflect.Struct {
				for j := range fv.Len() {
					requireSet(t, fv.Index(j), what, lateMayBeZero)
				}
			}
		default:
			require.False(t, fv.IsZero(), "%s: %s is not set", what, name)
		}
	}
}
