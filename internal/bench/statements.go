package bench

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/riverbus/riverbus/internal/benchkit"
)

// What an event costs the database: the latency and drain scenarios read
// pg_stat_statements for the measured database, on both sides, and report
// the statement time and the statements per event sent or job drained. Riverbus does more
// per event than raw River (the append, a share of a horizon round and of a
// pool batch, then River's own fetch and completion), and on a machine of
// two cores that work is what the latency ratios pay for under load.
//
// It needs the module loaded by the server (the throwaway server loads it
// when PostgreSQL ships it) and a superuser, as the throwaway server's is;
// without either the rows are left out and nothing fails.

// trackStatements makes the sessions opened to d from now on track their
// top-level statements (statements run by triggers and functions count in
// the statement that ran them), and reports whether they will.
func (d *database) trackStatements(ctx context.Context) bool {
	if !d.e.statements {
		return false
	}
	if err := d.TrackStatements(ctx); err != nil {
		d.e.Log.Debug("bench: statement tracking unavailable", "error", err)
		return false
	}
	return true
}

// statements reads the statement totals of one database over a measured
// phase: reset when the phase begins, totals when it ends.
type statements struct{ db *pgxpool.Pool }

func (s *statements) reset(ctx context.Context) error {
	if _, err := s.db.Exec(ctx, benchkit.SQLStatementsReset); err != nil {
		return fmt.Errorf("reset pg_stat_statements: %w", err)
	}
	return nil
}

// totals returns the statement time in milliseconds and the number of
// statements since the last reset.
func (s *statements) totals(ctx context.Context) (ms float64, calls int64, err error) {
	if err := s.db.QueryRow(ctx, benchkit.SQLStatementsTotals).Scan(&ms, &calls); err != nil {
		return 0, 0, fmt.Errorf("read pg_stat_statements: %w", err)
	}
	return ms, calls, nil
}

// costRows are a paired scenario's rows of what each unit (event, job)
// cost the database, when every sample of both sides was tracked (cost
// returns the statement time in ms, zero when not tracked, and the
// statements); row makes a paired row as the scenario's other rows.
func costRows[T any](unit string, rbs, raws []T, cost func(T) (ms, statements float64), row func(metric, unit string, target *Target, f func(T) float64) Result) []Result {
	tracked := func(s []T) bool {
		return !slices.ContainsFunc(s, func(x T) bool { ms, _ := cost(x); return ms == 0 })
	}
	if !tracked(rbs) || !tracked(raws) {
		return nil
	}
	return []Result{
		row("database time per "+unit, "ms", nil, func(x T) float64 { ms, _ := cost(x); return ms }),
		row("statements per "+unit, "", nil, func(x T) float64 { _, n := cost(x); return n }),
	}
}
