package migrations_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/internal/pgserver"
	"github.com/riverbus/riverbus/internal/pgtest"
	"github.com/riverbus/riverbus/internal/pooler"
	"github.com/riverbus/riverbus/internal/testwait"
	"github.com/riverbus/riverbus/migrations"
)

// Migrations run concurrently through PgBouncer in transaction mode both
// refuse before they take anything, naming the pooler; a direct migration
// afterwards finds no lock left and migrates at once.
func TestUpRefusesATransactionPooler(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	direct := pgtest.NewEmptyDatabase(t)
	b := pgtest.PgBouncer(t, pgserver.PoolModeTransaction)
	urls := []string{pgtest.Through(t, b, direct), pgtest.Through(t, b, direct, "default_query_exec_mode=exec")}
	errs := make([]error, len(urls))
	var wg sync.WaitGroup
	for i, url := range urls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = migrations.UpWithOpts(ctx, pgtest.Connect(t, url), &migrations.UpOpts{LockTimeout: 5 * time.Second})
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.ErrorIs(t, err, pooler.ErrTransactionPooler)
		require.ErrorContains(t, err, "riverbus migrate: the database URL leads through a connection pooler in transaction mode")
	}
	db := pgtest.Connect(t, direct)
	res, err := migrations.UpWithOpts(ctx, db, &migrations.UpOpts{LockTimeout: 5 * time.Second})
	require.NoError(t, err)
	require.NotEmpty(t, res.Riverbus, "the refused runs applied nothing")
	v, err := migrations.Version(ctx, db)
	require.NoError(t, err)
	require.Positive(t, v)
}

// A migration that waits for another's lock says, from the start of the
// wait, which session holds it, and goes on once it is let go.
func TestUpSaysWhatItWaitsFor(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	db := pgtest.NewPool(t)
	holder, err := db.Acquire(ctx)
	require.NoError(t, err)
	defer holder.Release()
	_, err = holder.Exec(ctx, "SET application_name = 'stuck migrate'")
	require.NoError(t, err)
	tx, err := holder.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(context.Background()) //nolint:errcheck
	_, err = tx.Exec(ctx, "LOCK TABLE "+pgx.Identifier{migrations.PrivateSchema("public"), "riverbus_migrate_lock"}.Sanitize()+" IN SHARE UPDATE EXCLUSIVE MODE")
	require.NoError(t, err)

	var log testwait.Buffer
	done := make(chan error, 1)
	go func() {
		_, err := migrations.UpWithOpts(ctx, db, &migrations.UpOpts{
			LockTimeout: 50 * time.Second,
			Logger:      slog.New(slog.NewTextHandler(&log, nil)),
		})
		done <- err
	}()
	want := fmt.Sprintf(`held_by="pid %d (role `, holder.Conn().PgConn().PID())
	testwait.Eventually(t, 30*time.Second, func() bool {
		return strings.Contains(log.String(), want)
	}, "the waiting migration did not name the holder")
	require.Contains(t, log.String(), `msg="migrate: take the migration lock: waiting for a lock"`)
	require.Contains(t, log.String(), `application_name \"stuck migrate\"`)
	require.Contains(t, log.String(), "gives_up_after=50s")

	require.NoError(t, tx.Rollback(ctx))
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("the migration did not go on once the lock was let go")
	}
}
