package integration_test

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/internal/pools"
	"github.com/riverbus/riverbus/workers"
)

// The chaos run's second set of pools, worked by a River client inside the
// test (not killed): what is checked is which events their jobs carry.
//
//   - grouped: transaction-grouped from the beginning.
//   - late_ordered: key-ordered, created from now while writers are in the
//     middle of their transactions.
//   - late_grouped: transaction-grouped, created from now mid-stream;
//
// and both late pools are then reset to a sequence inside a committed
// multi-event transaction.
//
// Each must receive every committed event after its start point exactly
// once (grouped pools: in a job of the event's own transaction), none
// before it.
const (
	chaosGrouped     = "grouped"
	chaosLateOrdered = "late_ordered"
	chaosLateGrouped = "late_grouped"
)

type chaosGroupedArgs struct{ workers.GroupArgs }

func (chaosGroupedArgs) Kind() string { return chaosGrouped }

type chaosLateOrderedArgs struct{ workers.Args }

func (chaosLateOrderedArgs) Kind() string { return chaosLateOrdered }

type chaosLateGroupedArgs struct{ workers.GroupArgs }

func (chaosLateGroupedArgs) Kind() string { return chaosLateGrouped }

type chaosPools struct {
	client *river.Client[pgx.Tx]

	// Set by createMidStream and reset; read after the writers stop.
	lateOrderedStart, lateGroupedStart int64
	resetTo                            int64
	resetMaxJob                        map[string]int64 // per pool: the highest job id at its reset
	created, wasReset                  bool
}

// startChaosPools creates the grouped pool and starts the client that
// works all three pools (River polls queues whose pools do not exist yet).
func startChaosPools(t *testing.T, ctx context.Context, db *pgxpool.Pool) *chaosPools {
	t.Helper()
	_, _, err := pools.Create(ctx, db, bustype.PoolParams{Name: chaosGrouped, Grouping: bustype.GroupTransaction})
	require.NoError(t, err)
	ws := river.NewWorkers()
	river.AddWorker(ws, river.WorkFunc(func(context.Context, *river.Job[chaosGroupedArgs]) error { return nil }))
	river.AddWorker(ws, river.WorkFunc(func(context.Context, *river.Job[chaosLateOrderedArgs]) error { return nil }))
	river.AddWorker(ws, river.WorkFunc(func(context.Context, *river.Job[chaosLateGroupedArgs]) error { return nil }))
	cfg, err := workers.RiverConfig(workers.RiverOpts{Workers: ws, Queues: map[string]int{
		bustype.DefaultQueue(chaosGrouped): 20, bustype.DefaultQueue(chaosLateOrdered): 20, bustype.DefaultQueue(chaosLateGrouped): 20,
	},
		// The test stands in for the rescuer of killed processes; this
		// client is never killed, but the PostgreSQL crash may lose a
		// completion: such a job is rescued after this.
		Config: workers.Config{JobTimeout: 5 * time.Second, RescueStuckJobsAfter: chaosRescueAfter, Logger: slog.New(slog.DiscardHandler)}})
	require.NoError(t, err)
	client, err := river.NewClient(workers.NewDriver(db, cfg.Logger), cfg)
	require.NoError(t, err)
	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = client.Stop(stopCtx)
	})
	return &chaosPools{client: client}
}

// createMidStream creates the two late pools from now, while writers hold
// transactions open: some of those commit events on both sides of the
// start point.
func (c *chaosPools) createMidStream(ctx context.Context, db *pgxpool.Pool) error {
	lo, _, err := pools.Create(ctx, db, bustype.PoolParams{Name: chaosLateOrdered, Ordering: bustype.OrderingKey, From: bustype.FromNow})
	if err != nil {
		return err
	}
	lg, _, err := pools.Create(ctx, db, bustype.PoolParams{Name: chaosLateGrouped, Grouping: bustype.GroupTransaction, From: bustype.FromNow})
	if err != nil {
		return err
	}
	c.lateOrderedStart, c.lateGroupedStart, c.created = lo.StartAfter, lg.StartAfter, true
	return nil
}

// reset moves both late pools to the first sequence of a committed
// transaction of several events below the horizon, so the reset point is
// inside it, and records each pool's highest job id at the reset: jobs above
// it were inserted after the reset.
func (c *chaosPools) reset(ctx context.Context, db *pgxpool.Pool) error {
	var to int64
	err := db.QueryRow(ctx, `SELECT coalesce(max(first), 0) FROM (
		SELECT min(global_sequence) AS first FROM riverbus_event
		WHERE global_sequence > $1 AND global_sequence <= (SELECT horizon FROM riverbus_horizon)
		GROUP BY transaction_id HAVING count(*) > 1) s`, c.lateGroupedStart).Scan(&to)
	if err != nil || to == 0 {
		return fmt.Errorf("no multi-event transaction to reset into yet (%v)", err)
	}
	maxJob := map[string]int64{}
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		for _, pool := range []string{chaosLateGrouped, chaosLateOrdered} {
			if _, err := pools.Reset(ctx, tx, pool, to); err != nil {
				return err
			}
			// The reset holds the pool row: every batch of the pool
			// committed before it, and every later one inserts jobs with
			// higher ids.
			var id int64
			if err := tx.QueryRow(ctx, `SELECT coalesce(max(id), 0) FROM river_job WHERE kind = $1`, pool).Scan(&id); err != nil {
				return err
			}
			maxJob[pool] = id
		}
		return nil
	})
	if err == nil {
		c.resetTo, c.resetMaxJob, c.wasReset = to, maxJob, true
	}
	return err
}

// pools lists the pools this set adds to the drain.
func (c *chaosPools) pools() []string {
	if c.created {
		return []string{chaosGrouped, chaosLateOrdered, chaosLateGrouped}
	}
	return []string{chaosGrouped}
}

// chaosDelivery is one event as a job of one pool carries it.
type chaosDelivery struct {
	job int64
	seq int64
	// txOK: the event is in a job of its own transaction (grouped pools).
	txOK bool
}

// check returns what is wrong with the three pools' jobs, given the
// committed sequences, as counted problems and up to ten examples.
func (c *chaosPools) check(t *testing.T, ctx context.Context, db *pgxpool.Pool, committed map[int64]bool) (problems int, examples []string) {
	t.Helper()
	bad := func(format string, a ...any) {
		problems++
		if len(examples) < 10 {
			examples = append(examples, fmt.Sprintf(format, a...))
		}
	}
	deliveries := func(pool string, grouped bool) []chaosDelivery {
		var out []chaosDelivery
		q := `SELECT j.id, (j.args->>'global_sequence')::bigint, true FROM river_job j WHERE j.kind = $1`
		if grouped {
			// A group's events, or an undeliverable part's sequences.
			q = `SELECT j.id, s.seq, coalesce(e.transaction_id::text = j.args->>'transaction_id', false)
				FROM river_job j CROSS JOIN LATERAL (
					SELECT (ev->>'global_sequence')::bigint AS seq FROM jsonb_array_elements(coalesce(j.args->'events', '[]')) AS ev
					UNION ALL
					SELECT x::bigint FROM jsonb_array_elements_text(coalesce(j.args->'sequences', '[]')) AS x
				) s
				LEFT JOIN riverbus_event e ON e.global_sequence = s.seq
				WHERE j.kind = $1`
		}
		require.NoError(t, retryFor(10*time.Second, func() error {
			rows, err := db.Query(ctx, q, pool)
			if err != nil {
				return err
			}
			out = nil
			var d chaosDelivery
			_, err = pgx.ForEachRow(rows, []any{&d.job, &d.seq, &d.txOK}, func() error { out = append(out, d); return nil })
			return err
		}))
		return out
	}
	// exactlyOnce checks that ds carry every committed sequence above from
	// exactly once and nothing at or below it.
	exactlyOnce := func(pool string, ds []chaosDelivery, from int64) {
		n := map[int64]int{}
		for _, d := range ds {
			n[d.seq]++
			if !d.txOK {
				bad("%s: sequence %d in a job of another transaction (job %d)", pool, d.seq, d.job)
			}
			if d.seq <= from {
				bad("%s: sequence %d at or before the start point %d", pool, d.seq, from)
			}
			if !committed[d.seq] {
				bad("%s: sequence %d never committed", pool, d.seq)
			}
		}
		seqs := make([]int64, 0, len(committed))
		for seq := range committed {
			seqs = append(seqs, seq)
		}
		sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
		for _, seq := range seqs {
			if seq > from && n[seq] != 1 {
				bad("%s: sequence %d delivered %d times", pool, seq, n[seq])
			}
		}
	}
	exactlyOnce(chaosGrouped, deliveries(chaosGrouped, true), 0)
	if !c.created {
		return problems, examples
	}
	for _, lp := range []struct {
		pool    string
		grouped bool
		start   int64
	}{{chaosLateOrdered, false, c.lateOrderedStart}, {chaosLateGrouped, true, c.lateGroupedStart}} {
		all := deliveries(lp.pool, lp.grouped)
		if !c.wasReset {
			exactlyOnce(lp.pool, all, lp.start)
			continue
		}
		// After the reset: every committed event above the reset point
		// once more, in jobs inserted after it.
		var after []chaosDelivery
		for _, d := range all {
			if d.job > c.resetMaxJob[lp.pool] {
				after = append(after, d)
			} else if d.seq <= lp.start {
				bad("%s: sequence %d before the start point %d", lp.pool, d.seq, lp.start)
			}
		}
		exactlyOnce(lp.pool+" after its reset", after, c.resetTo)
	}
	return problems, examples
}

// deadLettersByReason sums the dead letters by the last error, shortened,
// as "reason:count,..." ("none" when there are none).
func deadLettersByReason(t *testing.T, ctx context.Context, db *pgxpool.Pool) string {
	t.Helper()
	var out string
	require.NoError(t, retryFor(10*time.Second, func() error {
		return db.QueryRow(ctx, `SELECT coalesce(string_agg(reason || ':' || n, ',' ORDER BY reason), 'none') FROM (
			SELECT coalesce(nullif(regexp_replace(left(coalesce(args->>'undeliverable', errors->-1->>'error'), 40), '[^A-Za-z0-9_.-]+', '_', 'g'), ''), 'unknown') AS reason,
				count(*) AS n
			FROM riverbus_dead_letter GROUP BY 1) s`).Scan(&out)
	}))
	return out
}
