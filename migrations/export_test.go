package migrations

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
)

// UpWithMigrations is up with the riverbus migrations all: tests add one
// that must wait.
var UpWithMigrations = up

// OldestCode reads a migration's riverbus:oldest-code line.
var OldestCode = oldestCode

// Current returns the current texts of functions and triggers, in order.
var Current = current

// UpTo brings the database at pool to riverbus migration version (River's
// migrations all applied), as a build whose newest migration is version
// did: an older install, for tests of upgrades.
func UpTo(ctx context.Context, pool *pgxpool.Pool, version int) error {
	all, err := All()
	if err != nil {
		return err
	}
	for i, m := range all {
		if m.Version == version {
			_, err := up(ctx, pool, &UpOpts{}, all[:i+1])
			return err
		}
	}
	return fmt.Errorf("no migration %d", version)
}
