package fanout_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/fanout"
	"github.com/riverbus/riverbus/internal/fanouttest"
	"github.com/riverbus/riverbus/internal/poolmix"
	"github.com/riverbus/riverbus/internal/testwait"
)

// A horizon move runs a batch only for the pools whose filter matches one
// of its events: beside 50 pools of every kind that take none of them, a
// pool's events are fanned out by its own batches alone (each of the
// others running an empty batch on every move made one pool's event wait
// behind all of theirs). The others' cursors still follow the horizon,
// moved together by the statement that judges them.
func TestHorizonMoveRunsOnlyPoolsItConcerns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	for _, p := range poolmix.Params(50, "InvoiceIssued") {
		createPool(t, b.db, p)
	}
	createPool(t, b.db, bustype.PoolParams{Name: "billing", EventTypes: []string{"InvoiceIssued"}})
	f := newFanout(t, b.db, fanout.Config{})
	s := fanouttest.InitSignals(t, f)
	runFanout(t, f)

	others := map[string]int{}
	fannedOut := func(seq int64) {
		s.Pools.TestSignals.BatchDone.WaitFor(fmt.Sprintf("billing's batch past %d", seq), func(r fanout.BatchResult) bool {
			if r.Pool != "billing" {
				others[r.Pool]++
			}
			return r.Pool == "billing" && r.Cursor >= seq
		})
	}
	// The first event: every pool's first look.
	fannedOut(appendEvent(t, b.db, "InvoiceIssued"))
	clear(others)
	var last int64
	for range 20 {
		last = appendEvent(t, b.db, "InvoiceIssued")
		fannedOut(last)
	}
	require.Empty(t, others, "batches of pools that no event of the moves matched")

	testwait.Eventually(t, time.Minute, func() bool {
		var behind int
		require.NoError(t, b.db.QueryRow(ctx, `SELECT count(*) FROM riverbus_pool WHERE cursor_seq < $1`, last).Scan(&behind))
		return behind == 0
	}, "every pool's cursor at %d", last)
	for i := range 50 {
		counts, _ := jobs(t, b.db, fmt.Sprintf("other_%03d", i))
		require.Empty(t, counts)
	}
	counts, _ := jobs(t, b.db, "billing")
	require.Len(t, counts, 21)
}
