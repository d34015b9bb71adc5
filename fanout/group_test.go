package fanout_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/fanout"
	"github.com/riverbus/riverbus/internal/fanouttest"
	"github.com/riverbus/riverbus/internal/pools"
	"github.com/riverbus/riverbus/internal/testwait"
	"github.com/riverbus/riverbus/workers"
)

// group names a transaction group in these tests: a transaction, and a key
// in a key-ordered pool.
type group struct{ txid, key string }

// groupJobs returns a grouped pool's jobs, by id.
func groupJobs(t *testing.T, db *pgxpool.Pool, pool string) []workers.GroupArgs {
	t.Helper()
	rows, err := db.Query(context.Background(), `SELECT args FROM river_job WHERE kind = $1 ORDER BY id`, pool)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[workers.GroupArgs])
	require.NoError(t, err)
	return out
}

// delivered checks that every job of a grouped pool is well formed (parts
// numbered 1..n in id order, each carrying its first event's sequence,
// events in order and of one group) and returns each group's events as
// its jobs delivered them, parts joined.
func delivered(t *testing.T, db *pgxpool.Pool, pool string, byKey bool) map[group][]int64 {
	t.Helper()
	return deliveredSince(t, db, pool, byKey, 0)
}

// deliveredSince is delivered for the pool's jobs after its first skip.
func deliveredSince(t *testing.T, db *pgxpool.Pool, pool string, byKey bool, skip int) map[group][]int64 {
	t.Helper()
	out := map[group][]int64{}
	nextPart, parts := map[group]int{}, map[group]int{}
	for _, j := range groupJobs(t, db, pool)[skip:] {
		require.NotEmpty(t, j.Events, "job %+v", j)
		g := group{txid: j.TransactionID}
		if byKey {
			g.key = j.Key
		}
		require.Equal(t, j.Events[0].GlobalSequence, j.GlobalSequence, "a job carries its first event's sequence")
		nextPart[g]++
		require.Equal(t, nextPart[g], j.Part, "parts of %v in order", g)
		if j.Part == 1 {
			parts[g] = j.Parts
		}
		require.Equal(t, parts[g], j.Parts, "parts of %v", g)
		if j.Last() {
			nextPart[g] = 0
		}
		for _, e := range j.Events {
			if byKey {
				require.Equal(t, g.key, e.Key)
			}
			out[g] = append(out[g], e.GlobalSequence)
		}
	}
	for g, n := range nextPart {
		require.Zero(t, n, "group %v ends with its last part", g)
	}
	for g, seqs := range out {
		require.True(t, slices.IsSorted(seqs), "group %v in order: %v", g, seqs)
	}
	return out
}

// wantGroups is what a grouped pool starting after floor must deliver: the
// events above it, per transaction (and key).
func wantGroups(t *testing.T, db *pgxpool.Pool, floor int64, byKey bool) map[group][]int64 {
	t.Helper()
	rows, err := db.Query(context.Background(),
		`SELECT global_sequence, transaction_id::text, key FROM riverbus_event WHERE global_sequence > $1 ORDER BY global_sequence`, floor)
	require.NoError(t, err)
	out := map[group][]int64{}
	for rows.Next() {
		var seq int64
		var g group
		require.NoError(t, rows.Scan(&seq, &g.txid, &g.key))
		if !byKey {
			g.key = ""
		}
		out[g] = append(out[g], seq)
	}
	require.NoError(t, rows.Err())
	return out
}

// passUntilCaughtUp runs passes until every pool's cursor reaches the last
// event.
func passUntilCaughtUp(t *testing.T, db *pgxpool.Pool, f *fanout.Fanout) {
	t.Helper()
	ctx := context.Background()
	var last int64
	require.NoError(t, db.QueryRow(ctx, `SELECT coalesce(max(global_sequence), 0) FROM riverbus_event`).Scan(&last))
	testwait.Eventually(t, 30*time.Second, func() bool {
		pass(t, f)
		all, err := pools.List(ctx, db)
		require.NoError(t, err)
		for _, p := range all {
			if p.Cursor < last {
				return false
			}
		}
		return true
	}, "every pool caught up")
}

func appendKeyed(t *testing.T, db interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, key string) int64 {
	t.Helper()
	var seq int64
	require.NoError(t, db.QueryRow(context.Background(),
		`INSERT INTO riverbus_event (type, key, data) VALUES ('t', $1, '{"n": 1}') RETURNING global_sequence`, key).Scan(&seq))
	return seq
}

// A grouped pool whose start point falls inside a transaction that is still
// appending gets the transaction's events after the start point, as one
// group (per key, when key-ordered): with --from N, with --from now, and
// after a reset to N, whether the transaction commits before the fan-out
// reaches it or spans many batches. Nothing at or below the start point.
func TestGroupStartInsideTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	f := newFanout(t, b.db, fanout.Config{BatchSize: 3, GapTimeout: time.Hour})

	// Pools reset into the transaction after a first batch, and again once
	// they have delivered all of it.
	createPool(t, b.db, bustype.PoolParams{Name: "reset-into", Grouping: bustype.GroupTransaction})
	createPool(t, b.db, bustype.PoolParams{Name: "reset-into-key", Grouping: bustype.GroupTransaction, Ordering: bustype.OrderingKey})
	appendKeyed(t, b.db, "A")

	big, err := b.db.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = big.Rollback(ctx) })
	keys := []string{"A", "B", "C"}
	for i := range 5 {
		appendKeyed(t, big, keys[i%3])
	}
	mid := appendKeyed(t, big, "B") // the start point: the 6th event of the transaction
	appendKeyed(t, b.db, "A")       // another transaction commits meanwhile
	nowSeq := appendKeyed(t, big, "C")
	pass(t, f)

	starts := map[string]int64{} // pool → start point
	skip := map[string]int{}     // pool → jobs from before its start point
	for _, byKey := range []bool{false, true} {
		ordering, sfx := bustype.OrderingNone, ""
		if byKey {
			ordering, sfx = bustype.OrderingKey, "-key"
		}
		createPool(t, b.db, bustype.PoolParams{Name: "from-n" + sfx, Grouping: bustype.GroupTransaction, Ordering: ordering, From: bustype.FromSequence(mid)})
		starts["from-n"+sfx] = mid
		createPool(t, b.db, bustype.PoolParams{Name: "from-now" + sfx, Grouping: bustype.GroupTransaction, Ordering: ordering, From: bustype.FromNow})
		starts["from-now"+sfx] = nowSeq
		// Created from the beginning, reset forward before its first batch.
		createPool(t, b.db, bustype.PoolParams{Name: "reset-fwd" + sfx, Grouping: bustype.GroupTransaction, Ordering: ordering})
		_, err := pools.Reset(ctx, b.db, "reset-fwd"+sfx, mid)
		require.NoError(t, err)
		starts["reset-fwd"+sfx] = mid
		skip["reset-into"+sfx] = len(groupJobs(t, b.db, "reset-into"+sfx))
		_, err = pools.Reset(ctx, b.db, "reset-into"+sfx, mid)
		require.NoError(t, err)
		starts["reset-into"+sfx] = mid
	}
	createPool(t, b.db, bustype.PoolParams{Name: "plain-from-n", From: bustype.FromSequence(mid)})

	// The transaction goes on for several batches, then commits.
	for i := range 10 {
		appendKeyed(t, big, keys[i%3])
		if i == 4 {
			appendKeyed(t, b.db, "B")
		}
	}
	require.NoError(t, big.Commit(ctx))
	appendKeyed(t, b.db, "C")
	passUntilCaughtUp(t, b.db, f)

	for pool, from := range starts {
		byKey := strings.HasSuffix(pool, "-key")
		require.Equal(t, wantGroups(t, b.db, from, byKey), deliveredSince(t, b.db, pool, byKey, skip[pool]), "pool %s from %d", pool, from)
	}

	// Reset back into the committed transaction: what is above the reset
	// point is delivered once more, the transaction's part as one group.
	before := map[string]int{}
	for _, pool := range []string{"reset-into", "reset-into-key"} {
		before[pool] = len(groupJobs(t, b.db, pool))
		_, err := pools.Reset(ctx, b.db, pool, mid)
		require.NoError(t, err)
	}
	passUntilCaughtUp(t, b.db, f)
	for pool, n := range before {
		byKey := strings.HasSuffix(pool, "-key")
		require.Equal(t, wantGroups(t, b.db, mid, byKey), deliveredSince(t, b.db, pool, byKey, n), "pool %s reset back to %d", pool, mid)
	}
	c, _ := jobs(t, b.db, "plain-from-n")
	var want int
	require.NoError(t, b.db.QueryRow(ctx, `SELECT count(*) FROM riverbus_event WHERE global_sequence > $1`, mid).Scan(&want))
	require.Len(t, c, want, "the plain pool with the same start, for reference")
}

// A late event's group: a transaction whose first sequence the horizon
// skipped on the gap timeout is delivered once, late, from the pool's
// start point on, even when that point is between its events.
func TestGroupLateAcrossStartPoint(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	createPool(t, b.db, bustype.PoolParams{Name: "whole", Grouping: bustype.GroupTransaction})
	createPool(t, b.db, bustype.PoolParams{Name: "split", Grouping: bustype.GroupTransaction})
	f := newFanout(t, b.db, fanout.Config{BatchSize: 2, GapTimeout: time.Hour})
	clock := fanouttest.Clock(f)

	held, err := b.db.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = held.Rollback(ctx) })
	first := appendKeyed(t, held, "A")
	other := appendKeyed(t, b.db, "B")
	pass(t, f) // records the gap at first
	clock.Advance(time.Hour)
	pass(t, f) // skips it
	c, _ := jobs(t, b.db, "whole")
	require.Equal(t, 1, c[other], "gap skipped")
	// "split" restarts between the held transaction's two events.
	_, err = pools.Reset(ctx, b.db, "split", other)
	require.NoError(t, err)
	second := appendKeyed(t, held, "A")
	require.NoError(t, held.Commit(ctx))
	passUntilCaughtUp(t, b.db, f)
	for range 3 {
		pass(t, f)
	}

	require.Equal(t, wantGroups(t, b.db, 0, false), delivered(t, b.db, "whole", false))
	for _, j := range groupJobs(t, b.db, "whole") {
		require.Equal(t, j.GlobalSequence == first, j.Late, "the held transaction's group is late, whole: %+v", j)
	}
	// Every event any of split's jobs carries above the reset point, and
	// none of the held transaction's events at or below it (a job that
	// started before the reset point must not carry them either).
	var seqs []int64
	for _, j := range groupJobs(t, b.db, "split") {
		for _, e := range j.Events {
			require.NotEqual(t, first, e.GlobalSequence, "split got the held event before its reset point: %+v", j)
			if e.GlobalSequence > other {
				seqs = append(seqs, e.GlobalSequence)
			}
		}
	}
	require.Equal(t, []int64{second}, seqs, "after the reset point only, once")
}

// A transaction bigger than a part arrives as numbered parts, in order,
// covering every event once; in a key-ordered pool each key's parts are
// one lane's jobs in increasing sequence, only the first available. Not
// parallel: it lowers the package's part bounds.
func TestGroupParts(t *testing.T) {
	ctx := context.Background()
	restore := fanout.SetGroupPartBounds(7, 2000)
	defer restore()
	b := setup(t)
	createPool(t, b.db, bustype.PoolParams{Name: "parts", Grouping: bustype.GroupTransaction})
	createPool(t, b.db, bustype.PoolParams{Name: "parts-key", Grouping: bustype.GroupTransaction, Ordering: bustype.OrderingKey})
	f := newFanout(t, b.db, fanout.Config{BatchSize: 5})

	tx, err := b.db.Begin(ctx)
	require.NoError(t, err)
	for i := range 40 {
		data := `{"n": 1}`
		if i%10 == 3 { // big events: the byte bound cuts parts too
			data = fmt.Sprintf(`{"s": %q}`, strings.Repeat("x", 900))
		}
		_, err := tx.Exec(ctx, `INSERT INTO riverbus_event (type, key, data) VALUES ('t', $1, $2)`, []string{"A", "B"}[i%2], data)
		require.NoError(t, err)
	}
	require.NoError(t, tx.Commit(ctx))
	passUntilCaughtUp(t, b.db, f)

	for _, pool := range []string{"parts", "parts-key"} {
		byKey := pool == "parts-key"
		require.Equal(t, wantGroups(t, b.db, 0, byKey), delivered(t, b.db, pool, byKey), pool)
		jobs := groupJobs(t, b.db, pool)
		require.Greater(t, len(jobs), 40/7+map[bool]int{false: 0, true: 1}[byKey], "cut into parts")
		for _, j := range jobs {
			require.LessOrEqual(t, len(j.Events), 7)
			size := 0
			for _, e := range j.Events {
				size += len(e.Data)
			}
			require.True(t, len(j.Events) == 1 || size < 2000, "the byte bound holds")
		}
	}
	// Per key, parts wait in their lane: the first available, the others
	// pending, released in sequence order.
	rows, err := b.db.Query(ctx, `SELECT metadata->>'riverbus_lane', state::text, (args->>'part')::int FROM river_job
		WHERE kind = 'parts-key' ORDER BY (args->>'global_sequence')::bigint`)
	require.NoError(t, err)
	states := map[string][]string{}
	for rows.Next() {
		var lane, state string
		var part int
		require.NoError(t, rows.Scan(&lane, &state, &part))
		require.Equal(t, len(states[lane])+1, part, "lane %s in part order", lane)
		states[lane] = append(states[lane], state)
	}
	require.NoError(t, rows.Err())
	require.Len(t, states, 2)
	for lane, s := range states {
		require.Equal(t, "available", s[0], lane)
		for _, st := range s[1:] {
			require.Equal(t, "pending", st, lane)
		}
	}
}

// A pool switched to transaction groups while its cursor is inside a
// transaction gets the rest of that transaction as a group: the events it
// had delivered one by one are not delivered again, and none is skipped.
func TestGroupUpdateInsideTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	createPool(t, b.db, bustype.PoolParams{Name: "switch"})
	f := newFanout(t, b.db, fanout.Config{BatchSize: 3})
	tx, err := b.db.Begin(ctx)
	require.NoError(t, err)
	var seqs []int64
	for range 7 {
		seqs = append(seqs, appendKeyed(t, tx, "A"))
	}
	require.NoError(t, tx.Commit(ctx))
	testwait.Eventually(t, time.Minute, func() bool {
		pass(t, f)
		p, err := pools.Get(ctx, b.db, "switch")
		require.NoError(t, err)
		return p.Cursor > 0
	}, "first batch")
	p, err := pools.Get(ctx, b.db, "switch")
	require.NoError(t, err)
	require.Equal(t, seqs[2], p.Cursor, "one batch of three events")
	_, _, err = pools.Create(ctx, b.db, bustype.PoolParams{Name: "switch", Grouping: bustype.GroupTransaction, Update: true})
	require.NoError(t, err)
	passUntilCaughtUp(t, b.db, f)

	rows, err := b.db.Query(ctx, `SELECT args FROM river_job WHERE kind = 'switch' ORDER BY id`)
	require.NoError(t, err)
	all, err := pgx.CollectRows(rows, pgx.RowTo[map[string]any])
	require.NoError(t, err)
	require.Len(t, all, 4, "three events one by one, then one group")
	g := groupJobs(t, b.db, "switch")[3]
	var got []int64
	for _, e := range g.Events {
		got = append(got, e.GlobalSequence)
	}
	require.Equal(t, seqs[3:], got)
}
