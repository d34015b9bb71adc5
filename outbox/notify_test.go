package outbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/outbox"
)

// A writer that uses two-phase commit appends after SkipNotifyTx, or with
// riverbus.notify off for its whole session, and PREPAREs; without either,
// PostgreSQL refuses the PREPARE because the append notified.
func TestSkipNotifyLetsAWriterPrepare(t *testing.T) {
	t.Parallel()
	ctx, bundle := setup(t)

	conn, err := pgx.Connect(ctx, bundle.dbURL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	prepare := func(gid string, skip bool) error {
		tx, err := conn.Begin(ctx)
		require.NoError(t, err)
		defer tx.Rollback(ctx) //nolint:errcheck
		if skip {
			require.NoError(t, outbox.SkipNotifyTx(ctx, tx))
		}
		_, err = outbox.AppendTx(ctx, tx, event("prepared"))
		require.NoError(t, err)
		_, err = tx.Exec(ctx, "PREPARE TRANSACTION '"+gid+"'")
		return err
	}

	err = prepare("rb-notify", false)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Contains(t, pgErr.Message, "cannot PREPARE a transaction that has executed LISTEN, UNLISTEN, or NOTIFY")

	require.NoError(t, prepare("rb-skip", true))
	_, err = conn.Exec(ctx, "COMMIT PREPARED 'rb-skip'")
	require.NoError(t, err)
	require.Equal(t, 1, countEvents(t, bundle.db))

	// SET LOCAL ended with the transaction: the next append notifies again.
	err = prepare("rb-again", false)
	require.ErrorAs(t, err, &pgErr)

	// The whole session, as a connection parameter.
	cfg, err := pgx.ParseConfig(bundle.dbURL)
	require.NoError(t, err)
	cfg.RuntimeParams["riverbus.notify"] = "off"
	quiet, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	defer quiet.Close(ctx)
	tx, err := quiet.Begin(ctx)
	require.NoError(t, err)
	_, err = outbox.AppendTx(ctx, tx, event("prepared"))
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "PREPARE TRANSACTION 'rb-session'")
	require.NoError(t, err)
	_, err = quiet.Exec(ctx, "COMMIT PREPARED 'rb-session'")
	require.NoError(t, err)
	require.Equal(t, 2, countEvents(t, bundle.db))

	// A value that is not a boolean fails the append instead of notifying.
	tx, err = conn.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	_, err = tx.Exec(ctx, "SET LOCAL riverbus.notify = 'maybe'")
	require.NoError(t, err)
	_, err = outbox.AppendTx(ctx, tx, event("prepared"))
	require.ErrorContains(t, err, "invalid input syntax for type boolean")
}

// Append on a pool or an idle connection wakes the fan-out once it has
// committed, as the trigger's NOTIFY inside AppendTx's transaction does,
// and not when the session switched the wake-up off; a failed Append
// leaves its connection out of any transaction, ready for the next.
func TestAppendWakesAfterCommit(t *testing.T) {
	t.Parallel()
	ctx, bundle := setup(t)

	connect := func(params map[string]string) *pgx.Conn {
		cfg, err := pgx.ParseConfig(bundle.dbURL)
		require.NoError(t, err)
		for k, v := range params {
			cfg.RuntimeParams[k] = v
		}
		c, err := pgx.ConnectConfig(ctx, cfg)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close(context.Background()) })
		return c
	}
	listener, loud, quiet := connect(nil), connect(nil), connect(map[string]string{"riverbus.notify": "off"})
	_, err := listener.Exec(ctx, "LISTEN riverbus_event")
	require.NoError(t, err)
	next := func() *pgconn.Notification {
		waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		n, err := listener.WaitForNotification(waitCtx)
		require.NoError(t, err)
		return n
	}

	appended, err := outbox.Append(ctx, bundle.db, event("A"))
	require.NoError(t, err)
	require.Equal(t, "riverbus_event", next().Channel, "the pool's append woke the listener")
	require.Equal(t, 1, countEvents(t, bundle.db))

	_, err = outbox.Append(ctx, quiet, event("B"))
	require.NoError(t, err)
	dup := event("C")
	dup.EventID = appended[0].EventID
	_, err = outbox.Append(ctx, quiet, dup)
	require.ErrorIs(t, err, outbox.ErrDuplicate)
	require.Equal(t, byte('I'), quiet.PgConn().TxStatus())
	_, err = outbox.Append(ctx, quiet, event("D"))
	require.NoError(t, err)
	_, err = outbox.Append(ctx, loud, event("E"))
	require.NoError(t, err)
	// Notifications arrive in commit order: had the quiet session's
	// appends notified, theirs would come first.
	require.Equal(t, loud.PgConn().PID(), next().PID)
	require.Equal(t, 4, countEvents(t, bundle.db))
}
