package fanout_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/fanout"
	"github.com/riverbus/riverbus/internal/fanouttest"
	"github.com/riverbus/riverbus/internal/pgtest"
	"github.com/riverbus/riverbus/internal/testwait"
	"github.com/riverbus/riverbus/migrations"
)

// A rolling upgrade: a fan-out of this build runs; a newer build's migrate
// applies a migration this build may not run against. From its commit on,
// the old fan-out runs no round and no batch (it stops, saying which
// versions), and two fan-outs, old and new, cannot both run rounds. The
// newer build's fan-out then delivers every event once, none lost.
func TestFanoutStopsWhenTheSchemaNeedsNewerCode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewPool(t)
	fanouttest.CreatePool(t, db, bustype.PoolParams{Name: "orders", Ordering: bustype.OrderingKey})
	code := migrations.Newest()

	newFanout := func(code int) *fanout.Fanout {
		f, err := fanout.New(db, &fanout.Config{Logger: fanouttest.QuietLogger(), PollInterval: 50 * time.Millisecond,
			Gate: migrations.NewGate(code)})
		require.NoError(t, err)
		return f
	}
	old := newFanout(0)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	oldDone := make(chan error, 1)
	go func() { oldDone <- old.Run(runCtx) }()

	var seqs []int64
	appendSome := func(n int) {
		for range n {
			seqs = append(seqs, fanouttest.AppendEvent(t, db, "OrderPlaced"))
		}
	}
	appendSome(5)
	delivered := func(upTo int) bool {
		counts, _ := fanouttest.Jobs(t, db, "orders")
		for _, s := range seqs[:upTo] {
			if counts[s] == 0 {
				return false
			}
		}
		return true
	}
	testwait.Eventually(t, time.Minute, func() bool { return delivered(5) }, "the old fan-out delivers before the upgrade")

	require.Equal(t, code+1, pgtest.MigrateNewer(t, db))
	select {
	case err := <-oldDone:
		require.NoError(t, err, "Run returns nil when it stops for a newer schema")
	case <-time.After(5 * time.Second):
		t.Fatal("the old fan-out still runs 5 s after a migration that needs newer code")
	}
	want := &migrations.SchemaTooNewError{Schema: code + 1, Needs: code + 1, Code: code}
	require.Equal(t, want, old.Gate().Err())

	// Nothing the old code runs delivers now: its rounds and batches refuse
	// before they change anything.
	h := fanouttest.Horizon(t, db).Horizon
	appendSome(5)
	_, err := fanout.Advance(ctx, db, fanout.RoundParams{GapTimeout: time.Second, PageSize: 100, Fast: true, Code: code})
	require.Equal(t, want, migrations.AsSchemaTooNew(err), "an old round refuses: %v", err)
	_, err = fanout.Advance(ctx, db, fanout.RoundParams{GapTimeout: time.Second, PageSize: 100, Code: code})
	require.Equal(t, want, migrations.AsSchemaTooNew(err), "an old full round refuses: %v", err)
	require.Equal(t, h, fanouttest.Horizon(t, db).Horizon)
	// A round of the new code moves the horizon; a batch of the old code
	// still inserts nothing.
	res, err := fanout.Advance(ctx, db, fanout.RoundParams{GapTimeout: time.Second, PageSize: 100, Fast: true, Code: code + 1})
	require.NoError(t, err)
	require.True(t, res.Moved)
	_, _, err = old.FanOutPool(ctx, "orders")
	require.Equal(t, want, migrations.AsSchemaTooNew(err), "an old batch refuses: %v", err)
	require.False(t, delivered(10))

	// The newer build takes over: every event once.
	next := newFanout(code + 1)
	fanouttest.RunFanout(t, next)
	testwait.Eventually(t, time.Minute, func() bool { return delivered(10) }, "the new fan-out delivers the rest")
	counts, _ := fanouttest.Jobs(t, db, "orders")
	require.Len(t, counts, 10)
	for _, s := range seqs {
		require.Equal(t, 1, counts[s], "sequence %d", s)
	}
	require.NoError(t, next.Gate().Err())
}
