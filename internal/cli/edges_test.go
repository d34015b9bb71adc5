package cli_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/internal/pgtest"
)

// `pool create NAME --update` changes only the settings it is given; the
// others keep the pool's values (they used to go back to the defaults).
func TestPoolCreateUpdateKeepsUnsetSettings(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewDatabase(t)
	ok(t, run(t, dbURL, "pool", "create", "accounts", "--ordering", "key", "--on-dead-letter", "block",
		"--tags", "region=eu", "--max-attempts", "7", "--priority", "2", "--queue", "acct"))

	r := ok(t, run(t, dbURL, "pool", "create", "accounts", "--update", "--types", "account.opened"))
	require.Contains(t, r.stdout, "pool accounts: queue=acct types=account.opened tags=region=eu max_attempts=7 priority=2 ordering=key on_dead_letter=block group=none")

	r = ok(t, run(t, dbURL, "pool", "create", "accounts", "--update", "--types", "", "--max-attempts", "3"))
	require.Contains(t, r.stdout, "types=(all) tags=region=eu max_attempts=3 priority=2 ordering=key on_dead_letter=block")

	// A pool that does not exist yet is created with the defaults.
	r = ok(t, run(t, dbURL, "pool", "create", "fresh", "--update", "--types", "a.b"))
	require.Contains(t, r.stdout, "created pool fresh")
}
