package cli_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/internal/cli"
	"github.com/riverbus/riverbus/internal/fanouttest"
	"github.com/riverbus/riverbus/internal/pgtest"
	"github.com/riverbus/riverbus/internal/testwait"
	"github.com/riverbus/riverbus/migrations"
)

// A fan-out process of this build stops when a newer build's migrate
// applies a migration it may not run against: it exits with code 4 and
// says which versions, so an orchestrator replaces it; started again, it
// refuses at once, the same way. Migrate of this build changes nothing and
// says the schema is newer than it knows.
func TestFanoutExitsWhenTheSchemaNeedsNewerCode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := pgtest.NewDatabase(t)
	db := pgtest.Connect(t, dbURL)
	code := migrations.Newest()
	fanouttest.CreatePool(t, db, bustype.PoolParams{Name: "orders"})

	var errOut bytes.Buffer
	done := make(chan int, 1)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		done <- cli.MainContext(runCtx, []string{"--database-url", dbURL, "fanout", "--poll-interval", "50ms"}, io.Discard, &errOut)
	}()
	seq := fanouttest.AppendEvent(t, db, "OrderPlaced")
	testwait.Eventually(t, 30*time.Second, func() bool {
		counts, _ := fanouttest.Jobs(t, db, "orders")
		return counts[seq] == 1
	}, "the fan-out runs")

	require.Equal(t, code+1, pgtest.MigrateNewer(t, db))
	select {
	case exit := <-done:
		require.Equal(t, 4, exit, errOut.String())
	case <-time.After(10 * time.Second):
		t.Fatal("the fan-out still runs 10 s after a migration that needs newer code")
	}
	require.Contains(t, errOut.String(), fmt.Sprintf(
		"riverbus: stopped delivering: riverbus schema version %d is newer than this code knows (%d): replace this process with a build that knows schema version %d\n",
		code+1, code, code+1))

	r := run(t, dbURL, "fanout")
	require.Equal(t, 4, r.code, r.stderr)
	require.Contains(t, r.stderr, fmt.Sprintf("riverbus schema version %d is newer than this code knows (%d)", code+1, code))

	r = ok(t, run(t, dbURL, "migrate"))
	require.Contains(t, r.stdout, fmt.Sprintf("schema version %d is newer than this build knows (%d)", code+1, code))
}
