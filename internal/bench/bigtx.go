package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/fanout"
	"github.com/riverbus/riverbus/internal/benchkit"
	"github.com/riverbus/riverbus/internal/pools"
)

// The transaction of the big-transaction scenario: bigTxEvents events over
// bigTxKeys keys taking turns, appended by one COPY in one transaction.
const (
	bigTxEvents = 100_000
	bigTxKeys   = 100
)

// bigTxKind is a kind of pool the big-transaction scenario measures.
type bigTxKind struct {
	name   string // pool name and metric label
	params func(*bustype.PoolParams)
}

var bigTxKinds = []bigTxKind{
	{"plain", func(*bustype.PoolParams) {}},
	{"key-ordered", func(p *bustype.PoolParams) { p.Ordering = bustype.OrderingKey }},
	{"grouped", func(p *bustype.PoolParams) { p.Grouping = bustype.GroupTransaction }},
	{"grouped-by-key", func(p *bustype.PoolParams) {
		p.Grouping = bustype.GroupTransaction
		p.Ordering = bustype.OrderingKey
	}},
}

// runBigTx: how long after one transaction of bigTxEvents events commits
// each kind of pool has it delivered (every job inserted, the cursor past
// its last event), with the fan-out running: each kind alone, then all
// kinds in one database, where a pool should not wait for the others.
// Linear per-pool work keeps these at seconds; a grouped pool that re-read
// the transaction for every batch took minutes.
func runBigTx(ctx context.Context, e *env) ([]Result, error) {
	const name = "big-transaction"
	n := e.Scaled(bigTxEvents, least(e, 500, 100))
	alone := map[string][]float64{}
	together := map[string][]float64{}
	for run := range e.Opts.Runs {
		for _, k := range bigTxKinds {
			secs, err := bigTxRun(ctx, e, n, []bigTxKind{k})
			if err != nil {
				return nil, fmt.Errorf("run %d, %s alone: %w", run+1, k.name, err)
			}
			alone[k.name] = append(alone[k.name], secs[k.name])
			e.Log.Info("bench: measured", "scenario", name, "run", run+1, "pool", k.name, "seconds", secs[k.name])
		}
		secs, err := bigTxRun(ctx, e, n, bigTxKinds)
		if err != nil {
			return nil, fmt.Errorf("run %d, all kinds: %w", run+1, err)
		}
		for _, k := range bigTxKinds {
			together[k.name] = append(together[k.name], secs[k.name])
		}
		e.Log.Info("bench: measured", "scenario", name, "run", run+1, "pools", "all", "seconds", fmt.Sprint(secs))
	}
	note := fmt.Sprintf("one transaction of %d events (%d keys taking turns; grouped jobs of at most 10,000 events), the fan-out services with the default fanout.Config but GapTimeout %s; time from COMMIT until the pool's cursor passes the transaction, its jobs inserted",
		n, bigTxKeys, phaseTimeout)
	var rows []Result
	for _, k := range bigTxKinds {
		rows = append(rows, Result{Scenario: name, Metric: k.name + " pool alone", Unit: "s", Riverbus: benchkit.Summarize(alone[k.name]), Note: note})
	}
	for _, k := range bigTxKinds {
		rows = append(rows, Result{Scenario: name, Metric: k.name + " pool, all four kinds", Unit: "s", Riverbus: benchkit.Summarize(together[k.name]), Note: note})
	}
	return rows, nil
}

// bigTxRun creates a pool of each kind in a fresh database, starts
// the fan-out, appends one transaction of n events and returns, per pool,
// the seconds from its commit until the pool delivered it.
func bigTxRun(ctx context.Context, e *env, n int, kinds []bigTxKind) (map[string]float64, error) {
	d, db, release, err := e.open(ctx, schemaRiverbus, poolConns)
	if err != nil {
		return nil, err
	}
	defer release()
	for _, k := range kinds {
		params := bustype.PoolParams{Name: k.name, From: bustype.FromBeginning}
		k.params(&params)
		if _, _, err := pools.Create(ctx, db, params); err != nil {
			return nil, err
		}
	}
	if err := d.Settle(ctx, db); err != nil {
		return nil, err
	}
	// The transaction's COPY takes seconds: the gap it holds open must not
	// time out and turn its events into late ones.
	f, err := fanout.New(db, &fanout.Config{GapTimeout: phaseTimeout, Logger: e.Quiet})
	if err != nil {
		return nil, err
	}
	defer serveFanout(ctx, f)()

	last, err := appendOneTransaction(ctx, db, n, bigTxKeys)
	if err != nil {
		return nil, err
	}
	committed := time.Now()
	secs := map[string]float64{}
	deadline := committed.Add(phaseTimeout)
	for len(secs) < len(kinds) {
		rows, err := db.Query(ctx, `SELECT name, cursor_seq FROM riverbus_pool`)
		if err != nil {
			return nil, err
		}
		cursors, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct {
			Name   string
			Cursor int64
		}])
		if err != nil {
			return nil, err
		}
		now := time.Since(committed).Seconds()
		for _, c := range cursors {
			if _, ok := secs[c.Name]; !ok && c.Cursor >= last {
				secs[c.Name] = now
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%d of %d pools delivered the transaction after %s", len(secs), len(kinds), phaseTimeout)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	for _, k := range kinds {
		if err := expectDelivered(ctx, db, k.name, n); err != nil {
			return nil, err
		}
	}
	return secs, nil
}

// appendOneTransaction appends n events (keys as for eventKeyOf) in one
// transaction and returns the last global sequence.
func appendOneTransaction(ctx context.Context, db *pgxpool.Pool, n, keys int) (int64, error) {
	var last int64
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		i := 0
		_, err := tx.CopyFrom(ctx, pgx.Identifier{"riverbus_event"}, []string{"type", "key", "tags", "data", "metadata"},
			pgx.CopyFromFunc(func() ([]any, error) {
				if i == n {
					return nil, nil
				}
				row := []any{eventType, eventKeyOf(i, keys), []string{eventTag}, eventData(i), "{}"}
				i++
				return row, nil
			}))
		if err != nil {
			return fmt.Errorf("copy events: %w", err)
		}
		return tx.QueryRow(ctx, "SELECT max(global_sequence) FROM riverbus_event").Scan(&last)
	})
	return last, err
}

// expectDelivered checks that pool's jobs carry each of the n events once.
func expectDelivered(ctx context.Context, db *pgxpool.Pool, pool string, n int) error {
	var events, distinct int64
	err := db.QueryRow(ctx, `SELECT count(*), count(DISTINCT (e->>'global_sequence')::bigint)
		FROM river_job j, jsonb_array_elements(CASE WHEN j.args ? 'events' THEN j.args->'events' ELSE jsonb_build_array(j.args) END) e
		WHERE j.kind = $1`, pool).Scan(&events, &distinct)
	if err != nil {
		return err
	}
	if events != int64(n) || distinct != int64(n) {
		return fmt.Errorf("pool %s: jobs carry %d events (%d distinct), want %d", pool, events, distinct, n)
	}
	return nil
}
