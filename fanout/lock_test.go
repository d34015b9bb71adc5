package fanout_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/fanout"
)

// A session holding the round's lock (here the owner's round, left open)
// makes this instance skip its rounds; once that lasts, the service names
// the holder, in its log and LockHeld, and forgets it once a round gets the
// lock again.
func TestRoundLockHolderIsNamed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	conn, err := b.db.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, "SET application_name = 'stuck round'")
	require.NoError(t, err)
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	var locked bool
	require.NoError(t, tx.QueryRow(ctx, `SELECT riverbus_horizon_try_lock()`).Scan(&locked))
	require.True(t, locked)

	var logs bytes.Buffer
	s := fanout.NewHorizonService(b.db, &fanout.HorizonServiceConfig{GapTimeout: 10 * time.Second, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	s.SetLockHeldAfter(100 * time.Millisecond)
	res, err := s.Round(ctx)
	require.NoError(t, err)
	require.False(t, res.Locked)
	since, holders := s.LockHeld()
	require.False(t, since.IsZero())
	require.Empty(t, holders, "looked up only once the misses last")

	require.Eventually(t, func() bool {
		_, err := s.Round(ctx)
		_, holders = s.LockHeld()
		return err == nil && len(holders) > 0
	}, 10*time.Second, 20*time.Millisecond)
	require.Len(t, holders, 1)
	require.EqualValues(t, conn.Conn().PgConn().PID(), holders[0].PID)
	require.Equal(t, "stuck round", holders[0].ApplicationName)
	require.Contains(t, logs.String(), fmt.Sprintf(`pid %d (role `, holders[0].PID))

	require.NoError(t, tx.Rollback(ctx))
	res, err = s.Round(ctx)
	require.NoError(t, err)
	require.True(t, res.Locked)
	since, holders = s.LockHeld()
	require.True(t, since.IsZero())
	require.Empty(t, holders)
}
