package integration_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/internal/horizon"
	"github.com/riverbus/riverbus/internal/testwait"
)

// The chaos run's failover phase ("make chaos" runs it before TestChaos,
// not beside it, for RIVERBUS_CHAOS_DURATION but at most
// chaosFailoverMax: TestChaos checks that no pool stops for more than 10 s,
// which two runs sharing a small machine would break): writers append with random holds
// and rollbacks through the multi-host URL while two fan-out processes
// and a print-mode worker per pool (one plain, one key-ordered) deliver;
// a third of the way in, replication to the asynchronous standby is cut,
// the primary goes on for a few seconds, is killed -9, and the standby is
// promoted; the writers and processes follow it. Then no global_sequence
// and no River job id may have been delivered for two events, and every
// event the new primary holds reaches every pool. What the old primary
// committed after the cut is PostgreSQL's loss, counted but not failed on.
// It prints one line of figures ("chaos failover: ...").
// chaosFailoverMax bounds the failover phase: one promotion, with its
// traffic before and after, is what it is for.
const chaosFailoverMax = 2 * time.Minute

func TestChaosFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos run: a primary, a standby, a promotion")
	}
	ctx := context.Background()
	dur := min(chaosDuration(t), chaosFailoverMax)
	began := time.Now()
	c := newCluster(t)
	db, plain := c.run(t, bustype.PoolParams{Name: "fo_plain"}, "-concurrency", "20")
	_, _, err := createPool(ctx, db, bustype.PoolParams{Name: "fo_ordered", Ordering: bustype.OrderingKey})
	require.NoError(t, err)
	ordered := start(t, c.url, "testworker", nil, "-pool", "fo_ordered", "-mode", "print", "-id", "o", "-concurrency", "20")
	ordered.waitOutput("ready", 30*time.Second)
	start(t, c.url, "riverbus", []string{"RIVERBUS_POLL_INTERVAL=200ms", "RIVERBUS_LOG_LEVEL=warn", "RIVERBUS_GAP_TIMEOUT=2s"}, "fanout")
	workers := map[string]*proc{"fo_plain": plain, "fo_ordered": ordered}

	wcfg, err := pgxpool.ParseConfig(c.url)
	require.NoError(t, err)
	wcfg.MaxConns = 16 // every writer holds a connection through its transaction
	wdb, err := pgxpool.NewWithConfig(ctx, wcfg)
	require.NoError(t, err)
	t.Cleanup(wdb.Close)
	wctx, stop := context.WithTimeout(ctx, dur)
	defer stop()
	load := startWriters(wctx, wdb, writerOpts{writers: 8, perWriter: 1 << 40, rollbackPercent: 10,
		maxHold: 50 * time.Millisecond, eventsPerTx: 3, keys: 50})

	sleepCtx(wctx, dur/3)
	failover := c.cut(t)
	sleepCtx(wctx, 3*time.Second) // the old primary commits and delivers what the standby never sees
	failover()
	<-wctx.Done()
	load.wg.Wait()

	// The truth is what the new primary holds.
	var events map[string]int64
	require.NoError(t, retryFor(20*time.Second, func() error {
		rows, err := db.Query(ctx, `SELECT event_id::text, global_sequence FROM riverbus_event`)
		if err != nil {
			return err
		}
		events = map[string]int64{}
		var id string
		var seq int64
		_, err = pgx.ForEachRow(rows, []any{&id, &seq}, func() error { events[id] = seq; return nil })
		return err
	}))
	undelivered := func() (n int) {
		for _, w := range workers {
			got := deliveredEvents(w)
			for id := range events {
				if len(got[id]) == 0 {
					n++
				}
			}
		}
		return n
	}
	testwait.Eventually(t, 120*time.Second+dur/2, func() bool { return undelivered() == 0 }, "every event on the new primary delivered to every pool")

	reusedSeqs, reusedJobs := 0, 0
	eventOfJob := map[int64]string{}
	var examples []string
	for pool, w := range workers {
		eventOfSeq := map[int64]string{}
		for _, d := range deliveries(w) {
			if prev, ok := eventOfSeq[d.seq]; ok && prev != d.event {
				reusedSeqs++
				if len(examples) < 10 {
					examples = append(examples, fmt.Sprintf("%s: sequence %d for events %s and %s", pool, d.seq, prev, d.event))
				}
			}
			eventOfSeq[d.seq] = d.event
			if prev, ok := eventOfJob[d.job]; ok && prev != d.event {
				reusedJobs++
				if len(examples) < 10 {
					examples = append(examples, fmt.Sprintf("%s: job %d for events %s and %s", pool, d.job, prev, d.event))
				}
			}
			eventOfJob[d.job] = d.event
		}
	}
	load.mu.Lock()
	committed := len(load.committed)
	load.mu.Unlock()
	st, err := horizon.Get(ctx, db)
	require.NoError(t, err)
	var renumbered, rescued int64
	if f := st.LastFailover; f != nil {
		renumbered, rescued = f.EventsRenumbered, f.JobsRescued
	}
	fmt.Printf("chaos failover: %s events_committed=%d on_new_primary=%d lost_with_old_primary=%d failovers=%d renumbered=%d rescued_jobs=%d reused_sequences=%d reused_job_ids=%d undelivered=%d wall=%s\n",
		dur, committed, len(events), max(0, committed-len(events)), st.Failovers, renumbered, rescued, reusedSeqs, reusedJobs,
		undelivered(), time.Since(began).Round(time.Second))
	require.Equal(t, int64(1), st.Failovers, "the failover was fenced once")
	require.Zero(t, reusedSeqs+reusedJobs, "numbers delivered for two events (%d sequences, %d job ids), for example: %v", reusedSeqs, reusedJobs, examples)
}
