package pooler_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/internal/pgserver"
	"github.com/riverbus/riverbus/internal/pgtest"
	"github.com/riverbus/riverbus/internal/pooler"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func check(t *testing.T, url string) error {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	require.NoError(t, err)
	return pooler.Check(context.Background(), cfg, "riverbus test")
}

// A direct connection and a session-mode PgBouncer are sessions: no false
// positive, however often it is asked.
func TestCheckPassesASession(t *testing.T) {
	direct := pgtest.NewDatabase(t)
	session := pgtest.Through(t, pgtest.PgBouncer(t, pgserver.PoolModeSession), direct)
	for range 3 {
		require.NoError(t, check(t, direct))
		require.NoError(t, check(t, session))
	}
}

// A transaction-mode PgBouncer is found, with or without the exec mode
// appenders use through it, and the error names the pooler and the fix.
func TestCheckFindsATransactionPooler(t *testing.T) {
	direct := pgtest.NewDatabase(t)
	b := pgtest.PgBouncer(t, pgserver.PoolModeTransaction)
	for _, url := range []string{pgtest.Through(t, b, direct), pgtest.Through(t, b, direct, "default_query_exec_mode=exec")} {
		for range 3 {
			err := check(t, url)
			require.ErrorIs(t, err, pooler.ErrTransactionPooler)
			var perr *pooler.Error
			require.True(t, errors.As(err, &perr))
			require.Contains(t, err.Error(), "riverbus test: the database URL leads through a connection pooler in transaction mode")
			require.Contains(t, err.Error(), "PgBouncer")
			require.Contains(t, err.Error(), "directly or through a pooler in session mode")
		}
	}
}

// Statement mode refuses transaction blocks: found too.
func TestCheckFindsAStatementPooler(t *testing.T) {
	direct := pgtest.NewDatabase(t)
	b := pgtest.PgBouncer(t, pgserver.PoolMode("statement"))
	require.ErrorIs(t, check(t, pgtest.Through(t, b, direct)), pooler.ErrTransactionPooler)
}

// A server slow to start its first backend (a loaded machine) is no
// pooler and no failure: the check's first connection answers after more
// than the round-trip bound and the check still passes. A TCP relay in
// front of the real server holds the first connection's bytes back.
func TestCheckWaitsForASlowConnection(t *testing.T) {
	t.Parallel()
	var (
		once sync.Once
		held atomic.Int64
	)
	url := pgtest.Relay(t, pgtest.NewDatabase(t), func(int64) bool {
		once.Do(func() {
			start := time.Now()
			time.Sleep(pooler.TimeoutDefault + time.Second)
			held.Store(int64(time.Since(start)))
		})
		return true
	})
	require.NoError(t, check(t, url))
	require.Greater(t, time.Duration(held.Load()), pooler.TimeoutDefault, "the relay held the first connection longer than a round trip's bound")
}
