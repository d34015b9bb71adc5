// Package benchkit holds what riverbus's two benchmarks share: the core
// bench (internal/bench, riverbus beside raw River) and the Watermill bench
// (watermill/internal/wmbench, riverbus's Watermill adapter beside
// watermill-sql), so that both take the same command line (NewRoot,
// Execute), start the same server and give every measurement a fresh
// database (Env), run their child processes alike (StartChildren), pace
// open-loop load alike (Paced), and summarise, print and write figures the
// same way (Summarize, RunScenarios, Finish).
package benchkit

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Figure summarises one figure over runs.
type Figure struct {
	Median float64   `json:"median"`
	Min    float64   `json:"min"`
	Max    float64   `json:"max"`
	Runs   []float64 `json:"runs"`
}

// Summarize returns the median and spread of values, or nil for none.
func Summarize(values []float64) *Figure {
	if len(values) == 0 {
		return nil
	}
	s := slices.Clone(values)
	slices.Sort(s)
	n := len(s)
	median := s[n/2]
	if n%2 == 0 {
		median = (s[n/2-1] + s[n/2]) / 2
	}
	return &Figure{Median: median, Min: s[0], Max: s[n-1], Runs: slices.Clone(values)}
}

// Percentile returns the nearest-rank p-th percentile (0 < p ≤ 100) of
// sorted values.
func Percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	k := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[max(0, min(k, len(sorted)-1))]
}

// Ratios divides a[i] by b[i].
func Ratios(a, b []float64) []float64 {
	out := make([]float64, 0, len(a))
	for i := range min(len(a), len(b)) {
		if b[i] != 0 {
			out = append(out, a[i]/b[i])
		}
	}
	return out
}

// FormatNumber prints v for a table: two decimals for a ratio (unit
// "ratio" or "x"), thousands as k for a rate (a unit ending in /s), fewer
// decimals the bigger v is otherwise.
func FormatNumber(v float64, unit string) string {
	switch {
	case unit == "ratio" || unit == "x":
		return fmt.Sprintf("%.2f", v)
	case strings.HasSuffix(unit, "/s") && v >= 1000:
		return fmt.Sprintf("%.1fk", v/1000)
	case strings.HasSuffix(unit, "/s"):
		return fmt.Sprintf("%.0f", v)
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

// OneLine squeezes s into one line of at most 120 characters, for a table
// cell.
func OneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 120 {
		s = s[:117] + "..."
	}
	return s
}

// WriteJSON writes v as indented JSON to path, creating its directory.
func WriteJSON(path string, v any) error {
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("create %s: %w", dir, err)
		}
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode report: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}

// ModuleVersion returns the version of the module at path this program
// was built with, empty when unknown (a test binary).
func ModuleVersion(path string) string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	for _, m := range info.Deps {
		if m.Path == path {
			return m.Version
		}
	}
	return ""
}

// Ident quotes name as an SQL identifier.
func Ident(name string) string { return pgx.Identifier{name}.Sanitize() }

// MinLevel returns h without the records below level: River's and the
// fan-out's logs at warnings and errors beside a bench's progress.
func MinLevel(h slog.Handler, level slog.Level) slog.Handler { return minLevel{h, level} }

type minLevel struct {
	slog.Handler
	level slog.Level
}

func (h minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.level && h.Handler.Enabled(ctx, l)
}

func (h minLevel) WithAttrs(attrs []slog.Attr) slog.Handler {
	return minLevel{h.Handler.WithAttrs(attrs), h.level}
}

func (h minLevel) WithGroup(name string) slog.Handler {
	return minLevel{h.Handler.WithGroup(name), h.level}
}

// Paced calls do(i) for i in [0, n) at rate per second, open loop: call i is
// due at start + i/rate whatever the earlier calls took, on conc goroutines.
// It returns the achieved rate.
func Paced(ctx context.Context, n int, rate float64, conc int, do func(ctx context.Context, i int) error) (float64, error) {
	tickets := make(chan int)
	wait := Work(conc, tickets, func(i int) error { return do(ctx, i) })
	start := time.Now()
	handed := 0
	for i := range n {
		due := start.Add(time.Duration(float64(i) / rate * float64(time.Second)))
		if d := time.Until(due); d > 0 {
			time.Sleep(d)
		}
		select {
		case tickets <- i:
			handed++
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
	}
	sending := time.Since(start) // until the last call was handed out
	close(tickets)
	err := wait()
	if err == nil {
		err = ctx.Err()
	}
	// Call i is due at i/rate: a run on schedule reports rate.
	achieved := rate
	if handed > 1 && sending > 0 {
		achieved = min(rate, float64(handed-1)/sending.Seconds())
	}
	return achieved, err
}

// Work calls do with each item of items on conc goroutines until items is
// closed; wait waits for them and returns the first error do returned.
func Work[T any](conc int, items <-chan T, do func(T) error) (wait func() error) {
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	for range conc {
		wg.Go(func() {
			for item := range items {
				if err := do(item); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				}
			}
		})
	}
	return func() error {
		wg.Wait()
		return firstErr
	}
}

// CreateStatementsExtension creates pg_stat_statements in the database
// behind pool and reports whether the server tracks statements.
func CreateStatementsExtension(ctx context.Context, pool *pgxpool.Pool) bool {
	if _, err := pool.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err != nil {
		return false
	}
	// The view refuses to be read when the module is not loaded (one row
	// at most is read; a constant false filter would read none).
	var n int64
	return pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM pg_stat_statements LIMIT 1) s`).Scan(&n) == nil
}

// The statements of a measured phase of one database, read by a session of
// that database: reset when the phase begins, totals when it ends.
const (
	SQLStatementsReset = `SELECT pg_stat_statements_reset(0, (SELECT oid FROM pg_database WHERE datname = current_database()), 0)`
	// total_exec_time includes the time statements waited (for a lock, for
	// the WAL to be flushed at commit); planning is not tracked.
	SQLStatementsTotals = `SELECT coalesce(sum(total_exec_time), 0)::float8, coalesce(sum(calls), 0)::bigint
FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())`
)

// TrackStatements makes the sessions opened to database from now on track
// their top-level statements (statements run by triggers and functions
// count in the statement that ran them); admin must be a superuser's.
func TrackStatements(ctx context.Context, admin *pgx.Conn, database string) error {
	_, err := admin.Exec(ctx, "ALTER DATABASE "+Ident(database)+" SET pg_stat_statements.track = 'top'")
	return err
}
