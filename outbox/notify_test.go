package outbox_test

import (
	"testing"

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
