package fanout_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/fanout"
	"github.com/riverbus/riverbus/internal/pools"
	"github.com/riverbus/riverbus/outbox"
	"github.com/riverbus/riverbus/workers"
)

// The plain path (one statement) and the general path (event heads read
// into Go, args built by the insert) must give the same jobs: same envelope, same
// filters, same job columns.
func TestPlainPathMatchesGeneralPath(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	createPool(t, b.db, bustype.PoolParams{Name: "all", Queue: "q-all", MaxAttempts: 7, Priority: 3})
	createPool(t, b.db, bustype.PoolParams{Name: "typed", EventTypes: []string{"order.placed", "order.paid"}})
	createPool(t, b.db, bustype.PoolParams{Name: "tagged", Tags: []string{"tenant=acme"}})
	createPool(t, b.db, bustype.PoolParams{Name: "keyed", Ordering: bustype.OrderingKey})
	f := newFanout(t, b.db, fanout.Config{BatchSize: 3})

	appendSome := func() {
		for i, ev := range []outbox.Event{
			{Type: "order.placed", Key: "o-1", Tags: []string{"tenant=acme", "region=eu"}, Data: json.RawMessage(`{"total": 12.5, "items": ["a", "b"]}`), Metadata: json.RawMessage(`{"trace": "x"}`)},
			{Type: "order.paid", Key: "o-1", Data: json.RawMessage(`{"unicode": "naïve ✓", "nested": {"n": null}}`)},
			{Type: "order.shipped", Key: "o-2", Tags: []string{"tenant=acme"}, Data: json.RawMessage(`[1, 2, 3]`)},
			{Type: "user.created", Data: json.RawMessage(`"just a string"`)},
		} {
			_, err := outbox.Append(ctx, b.db, ev)
			require.NoError(t, err, i)
		}
	}
	drainPasses := func() {
		for pass(t, f).More {
		}
		pass(t, f)
	}

	appendSome()
	drainPasses() // the general path: the first look at each pool
	for _, p := range []string{"all", "typed", "tagged"} {
		require.True(t, f.UsesPlainPath(p), p)
	}
	require.False(t, f.UsesPlainPath("keyed"))
	appendSome()
	drainPasses() // the plain path for all but keyed

	events, err := outbox.Read(ctx, b.db, outbox.ReadParams{})
	require.NoError(t, err)
	require.Len(t, events, 8)
	want := map[string][]outbox.Event{}
	for _, e := range events {
		want["all"] = append(want["all"], e)
		want["keyed"] = append(want["keyed"], e)
		if e.Type == "order.placed" || e.Type == "order.paid" {
			want["typed"] = append(want["typed"], e)
		}
		for _, tag := range e.Tags {
			if tag == "tenant=acme" {
				want["tagged"] = append(want["tagged"], e)
			}
		}
	}
	for pool, evs := range want {
		rows, err := b.db.Query(ctx, `SELECT args, queue, max_attempts, priority, state, metadata, tags FROM river_job WHERE kind = $1 ORDER BY id`, pool)
		require.NoError(t, err)
		var got []outbox.Event
		for rows.Next() {
			var args, metadata []byte
			var queue, state string
			var maxAttempts, priority int
			var tags []string
			require.NoError(t, rows.Scan(&args, &queue, &maxAttempts, &priority, &state, &metadata, &tags))
			// Strictly: no key that workers.Args does not have, and all
			// of its keys (envelope_test.go pins every path and shape).
			got = append(got, decodeArgs[workers.Args](t, args, pool).Event)
			var raw map[string]json.RawMessage
			require.NoError(t, json.Unmarshal(args, &raw))
			require.NotContains(t, raw, "late", pool)
			require.Empty(t, tags, pool)
			if pool == "all" {
				require.Equal(t, "q-all", queue)
				require.Equal(t, 7, maxAttempts)
				require.Equal(t, 3, priority)
				require.JSONEq(t, `{}`, string(metadata))
			}
			if pool != "keyed" {
				require.Equal(t, "available", state)
			}
		}
		require.NoError(t, rows.Err())
		require.Len(t, got, len(evs), pool)
		for i := range evs {
			require.True(t, evs[i].OccurredAt.Equal(got[i].OccurredAt), pool)
			got[i].OccurredAt = evs[i].OccurredAt
			require.Equal(t, string(mustCompact(t, evs[i].Data)), string(mustCompact(t, got[i].Data)))
			require.Equal(t, string(mustCompact(t, evs[i].Metadata)), string(mustCompact(t, got[i].Metadata)))
			got[i].Data, got[i].Metadata = evs[i].Data, evs[i].Metadata
			require.Equal(t, evs[i], got[i], pool)
		}
		p, err := pools.Get(ctx, b.db, pool)
		require.NoError(t, err)
		require.Equal(t, events[len(events)-1].GlobalSequence, p.Cursor, pool)
		require.Equal(t, int64(len(evs)), p.EventsFannedOut, pool)
	}
}

func mustCompact(t *testing.T, raw json.RawMessage) []byte {
	t.Helper()
	var v any
	require.NoError(t, json.Unmarshal(raw, &v))
	out, err := json.Marshal(v)
	require.NoError(t, err)
	return out
}

// A server on which the plain path's statement cannot run (before
// PostgreSQL 14 it has no pg_column_compression; here a stand-in in the
// search path fails as the missing function does) sends every pool to the
// general path instead of failing it.
func TestPlainPathUnavailableFallsBackToGeneralPath(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	_, err := b.db.Exec(ctx, `CREATE FUNCTION public.pg_column_compression(jsonb) RETURNS text LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION USING ERRCODE = 'undefined_function', MESSAGE = 'function pg_column_compression(jsonb) does not exist'; END $$`)
	require.NoError(t, err)
	cfg := b.db.Config().Copy()
	cfg.ConnConfig.RuntimeParams["search_path"] = "public, pg_catalog"
	db, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(db.Close)

	createPool(t, db, bustype.PoolParams{Name: "plain"})
	f := newFanout(t, db, fanout.Config{})
	first := appendEvent(t, db, "a")
	drain(t, f)
	require.True(t, f.UsesPlainPath("plain"))
	second := appendEvent(t, db, "b")
	drain(t, f) // the plain statement fails; the general path takes the batch
	require.False(t, f.UsesPlainPath("plain"), "the plain path was given up")
	third := appendEvent(t, db, "c")
	drain(t, f)
	c, _ := jobs(t, db, "plain")
	require.Equal(t, map[int64]int{first: 1, second: 1, third: 1}, c)
}
