package cli

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/riverbus/riverbus"
	"github.com/riverbus/riverbus/internal/upgrade"
	"github.com/riverbus/riverbus/migrations"
)

// exitSchemaTooNew is the exit code of a command that stopped, or would
// not start, because the schema needs newer code than this build: a newer
// build migrated the database (docs/operations.md, "Upgrading riverbus"). An
// orchestrator replaces the process with the newer build.
const exitSchemaTooNew = 4

// waitClient blocks until ctx ends (nil) or client stops on its own, and
// then returns why: the schema needs newer code (exitSchemaTooNew).
func waitClient(ctx context.Context, client *riverbus.Client) error {
	select {
	case <-ctx.Done():
		return nil
	case <-client.Stopped():
	}
	if err := client.Err(); err != nil {
		return fmt.Errorf("stopped delivering: %w", err)
	}
	return nil
}

// watchSchema is waitClient for a command that runs no Client (ui): it
// reads the schema's versions until ctx ends (nil) or the schema needs
// newer code than this build, and then returns that error.
func (a *app) watchSchema(ctx context.Context, db *pgxpool.Pool) error {
	gate := migrations.NewGate(0)
	ctx, cancel := gate.Context(ctx)
	defer cancel()
	_ = (&upgrade.Watcher{DB: db, Gate: gate, Logger: a.logger}).Run(ctx)
	if err := gate.Err(); err != nil {
		return fmt.Errorf("stopped: %w", err)
	}
	return nil
}
