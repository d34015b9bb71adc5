package wmbench

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/riverbus/riverbus/internal/benchkit"
)

// What a message costs the database, on each side: the scenarios read
// pg_stat_statements for the measured database over the timed phase and
// report the statement time and the statements per message. Top-level
// statements only: what a trigger or a function runs counts in the
// statement that ran it. It needs the module loaded by the server (the
// throwaway server loads it when PostgreSQL ships it) and a superuser, as
// the throwaway server's is; without either those rows are left out.

// trackStatements opens d.stats, creates the extension in d (the riverbus
// template has it already), then makes the sessions opened to d from now
// on track their top-level statements.
func (d *database) trackStatements(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, d.URL)
	if err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err != nil {
		_ = conn.Close(ctx)
		return err
	}
	if err := d.TrackStatements(ctx); err != nil {
		_ = conn.Close(ctx)
		return err
	}
	d.stats = conn
	return nil
}

// resetStatements starts a measured phase: the database's statement totals
// from zero.
func (d *database) resetStatements(ctx context.Context) error {
	if d.stats == nil {
		return nil
	}
	if _, err := d.stats.Exec(ctx, benchkit.SQLStatementsReset); err != nil {
		return fmt.Errorf("reset pg_stat_statements: %w", err)
	}
	return nil
}

// addStatements ends a measured phase of messages messages: it adds the
// database time per message (ms) and the statements per message to s under
// prefix+"db_ms" and prefix+"statements", when the database is tracked.
func (d *database) addStatements(ctx context.Context, s sample, prefix string, messages int) error {
	if d.stats == nil || messages == 0 {
		return nil
	}
	var ms float64
	var calls int64
	if err := d.stats.QueryRow(ctx, benchkit.SQLStatementsTotals).Scan(&ms, &calls); err != nil {
		return fmt.Errorf("read pg_stat_statements: %w", err)
	}
	s[prefix+"db_ms"] = ms / float64(messages)
	s[prefix+"statements"] = float64(calls) / float64(messages)
	top, err := d.topStatements(ctx, messages)
	if err != nil {
		return err
	}
	phase := strings.TrimSuffix(prefix, "_")
	d.e.recordTop(TopStatements{Scenario: d.e.scenario, Phase: phase, Side: string(d.side), Statements: top})
	return nil
}

// TopStatements are the statements that took the most database time in one
// phase of a scenario on one side, in its first run.
type TopStatements struct {
	Scenario   string      `json:"scenario"`
	Phase      string      `json:"phase,omitempty"`
	Side       string      `json:"side"`
	Statements []Statement `json:"statements"`
}

// recordTop keeps t unless the phase was recorded already (in an earlier
// run).
func (e *env) recordTop(t TopStatements) {
	e.top.mu.Lock()
	defer e.top.mu.Unlock()
	for _, x := range e.top.list {
		if x.Scenario == t.Scenario && x.Phase == t.Phase && x.Side == t.Side {
			return
		}
	}
	e.top.list = append(e.top.list, t)
}

// topStatementsShown is how many statements topStatements returns.
const topStatementsShown = 4

// sqlTopStatements: the statements that took the most time in the
// database, their text shortened to its first line of about 100
// characters.
const sqlTopStatements = `SELECT left(regexp_replace(query, '\s+', ' ', 'g'), 100), calls, total_exec_time
FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
ORDER BY total_exec_time DESC LIMIT $1`

// Statement is one of the statements that took the most database time in
// a measured phase.
type Statement struct {
	Query string `json:"query"`
	// CallsPerMessage is how often it ran for each message; MsPerCall its
	// mean time.
	CallsPerMessage float64 `json:"calls_per_message"`
	MsPerCall       float64 `json:"ms_per_call"`
}

// topStatements returns the statements that took the most time in the
// phase since the last reset, per message; nil when the database is not
// tracked.
func (d *database) topStatements(ctx context.Context, messages int) ([]Statement, error) {
	if d.stats == nil || messages == 0 {
		return nil, nil
	}
	rows, err := d.stats.Query(ctx, sqlTopStatements, topStatementsShown)
	if err != nil {
		return nil, fmt.Errorf("read pg_stat_statements: %w", err)
	}
	defer rows.Close()
	var out []Statement
	for rows.Next() {
		var q string
		var calls int64
		var ms float64
		if err := rows.Scan(&q, &calls, &ms); err != nil {
			return nil, err
		}
		out = append(out, Statement{Query: q, CallsPerMessage: float64(calls) / float64(messages), MsPerCall: ms / float64(max(calls, 1))})
	}
	return out, rows.Err()
}
