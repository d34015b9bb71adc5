// Package upgrade stops a process's delivery when the schema needs newer
// code than it runs: a rolling upgrade migrated the database under it
// (docs/design.md §10, docs/operations.md "Upgrading riverbus").
//
// Every delivering transaction (a horizon round, a pool batch, a retention
// batch) runs migrations.SQLSchemaCheck first and fails with a
// *migrations.SchemaTooNewError, before it changes anything, once the
// schema needs newer code; the part that ran it stops its migrations.Gate.
// A Watcher polls the versions for the parts that hold no such transaction
// (River fetching pool jobs, the UI). Whoever runs the parts stops them
// all when the Gate stops, and says why.
package upgrade

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/riverbus/riverbus/internal/service"
	"github.com/riverbus/riverbus/migrations"
)

// WatchIntervalDefault is how often a Watcher reads the schema's versions:
// River's fetching and the UI stop within about this long of a migration
// that needs newer code (the delivering transactions stop at once).
const WatchIntervalDefault = time.Second

// Watcher stops a migrations.Gate when the schema needs newer code, read every
// Interval (a plain read of riverbus_migration, no lock).
type Watcher struct {
	DB       *pgxpool.Pool
	Gate     *migrations.Gate
	Interval time.Duration // zero: WatchIntervalDefault
	Logger   *slog.Logger
}

// Run reads the versions until ctx ends or the gate stops, then returns
// nil. A failed read is logged and retried with a backoff.
func (w *Watcher) Run(ctx context.Context) error {
	interval := cmp.Or(w.Interval, WatchIntervalDefault)
	logger := cmp.Or(w.Logger, slog.Default())
	backoff := time.Duration(0)
	for {
		wait := interval
		err := migrations.Check(ctx, w.DB, w.Gate.Code())
		switch {
		case ctx.Err() != nil:
			return nil
		case w.Gate.Stop(err):
			return nil
		case err != nil && !errors.Is(err, migrations.ErrOlderSchema):
			backoff = service.NextBackoff(backoff)
			wait = service.Jitter(backoff)
			logger.Warn("reading the schema version failed; retrying", "error", err, "retry_in", wait.Round(time.Millisecond))
		default:
			backoff = 0
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-w.Gate.Stopped():
			timer.Stop()
			return nil
		case <-timer.C:
		}
	}
}
