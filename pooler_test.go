package riverbus_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus"
	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/internal/pgserver"
	"github.com/riverbus/riverbus/internal/pgtest"
	"github.com/riverbus/riverbus/internal/pooler"
	"github.com/riverbus/riverbus/outbox"
	"github.com/riverbus/riverbus/workers"
)

// execMode is what an appender's URL through a transaction pooler adds
// (PgBouncer before 1.21 keeps no prepared statements across clients).
const execMode = "default_query_exec_mode=exec"

// Appends through PgBouncer in transaction mode, by the three paths an
// application has (Append on a pool, AppendTx in its own transaction, a
// plain INSERT), reach a fan-out and workers that run on a direct URL.
func TestAppendsThroughATransactionPoolerAreDelivered(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	direct := pgtest.NewDatabase(t)
	db := pgtest.Connect(t, direct)
	app := pgtest.Connect(t, pgtest.Through(t, pgtest.PgBouncer(t, pgserver.PoolModeTransaction), direct, execMode))

	w := startBilling(t, db, 6)

	for range 2 {
		_, err := outbox.Append(ctx, app, outbox.Event{Type: "InvoiceIssued", Key: "a", Data: json.RawMessage(`{"n":1}`)})
		require.NoError(t, err)
		require.NoError(t, pgx.BeginFunc(ctx, app, func(tx pgx.Tx) error {
			_, err := outbox.AppendTx(ctx, tx, outbox.Event{Type: "InvoiceIssued", Key: "b", Data: json.RawMessage(`{"n":2}`)})
			return err
		}))
		_, err = app.Exec(ctx, `INSERT INTO riverbus_event (type, key, data) VALUES ('InvoiceIssued', 'c', '{"n":3}')`)
		require.NoError(t, err)
	}
	select {
	case <-w.done:
	case <-time.After(60 * time.Second):
		t.Fatal("the events appended through the pooler were not delivered")
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	require.ElementsMatch(t, []int64{1, 2, 3, 4, 5, 6}, w.seen)
}

// With pgx's default exec mode, appends through a transaction pooler fail
// on another client's cached statement; the error says what to add.
func TestAppendThroughATransactionPoolerNamesTheExecMode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	direct := pgtest.NewDatabase(t)
	url := pgtest.Through(t, pgtest.PgBouncer(t, pgserver.PoolModeTransaction), direct)
	var err error
	// Two client connections that take turns on the pooler's server
	// connections: the second prepares what the first left there.
	for i := 0; i < 10 && err == nil; i++ {
		conn, cerr := pgx.Connect(ctx, url)
		require.NoError(t, cerr)
		_, err = outbox.Append(ctx, conn, outbox.Event{Type: "InvoiceIssued", Data: json.RawMessage(`{}`)})
		conn.Close(ctx)
	}
	require.Error(t, err, "pgx's statement cache did not fail through the pooler")
	var perr *pooler.PreparedStatementError
	require.True(t, errors.As(err, &perr), "got %v", err)
	require.ErrorContains(t, err, "add default_query_exec_mode=exec to the database URL")
}

// The fan-out and the workers refuse to start through a transaction
// pooler, naming it and the fix; operator methods work through it.
func TestClientStartRefusesATransactionPooler(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	direct := pgtest.NewDatabase(t)
	pooled := pgtest.Connect(t, pgtest.Through(t, pgtest.PgBouncer(t, pgserver.PoolModeTransaction), direct, execMode))

	admin, err := riverbus.NewClient(pooled, nil)
	require.NoError(t, err)
	_, _, err = admin.PoolCreate(ctx, bustype.PoolParams{Name: "billing"})
	require.NoError(t, err)
	_, err = admin.PoolPause(ctx, "billing")
	require.NoError(t, err)

	err = admin.Start(ctx)
	require.ErrorIs(t, err, riverbus.ErrTransactionPooler)
	require.ErrorContains(t, err, "riverbus: fan-out: the database URL leads through a connection pooler in transaction mode (such as PgBouncer")
	require.ErrorContains(t, err, "directly or through a pooler in session mode")

	ws := workers.NewRegistry()
	workers.Add(ws, newRecorder[billingArgs](1), nil)
	workersOnly, err := riverbus.NewClient(pooled, &riverbus.Config{Workers: ws, FanoutDisabled: true})
	require.NoError(t, err)
	err = workersOnly.Start(ctx)
	require.ErrorIs(t, err, riverbus.ErrTransactionPooler)
	require.ErrorContains(t, err, "riverbus: workers: ")
	require.Nil(t, workersOnly.River(), "nothing runs after a refused Start")
}

// A session-mode pooler is a session: the client runs through it.
func TestClientRunsThroughASessionPooler(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	direct := pgtest.NewDatabase(t)
	db := pgtest.Connect(t, pgtest.Through(t, pgtest.PgBouncer(t, pgserver.PoolModeSession), direct))
	w := startBilling(t, db, 1)
	_, err := outbox.Append(ctx, db, outbox.Event{Type: "InvoiceIssued", Data: json.RawMessage(`{}`)})
	require.NoError(t, err)
	select {
	case <-w.done:
	case <-time.After(60 * time.Second):
		t.Fatal("the event was not delivered through the session pooler")
	}
}

// startBilling creates the pool billing and starts a client over db that
// fans out and works it, stopped when the test ends; the worker it returns
// is done after want jobs.
func startBilling(t *testing.T, db *pgxpool.Pool, want int) *recordingWorker[billingArgs] {
	t.Helper()
	ctx := context.Background()
	admin, err := riverbus.NewClient(db, nil)
	require.NoError(t, err)
	_, _, err = admin.PoolCreate(ctx, bustype.PoolParams{Name: "billing"})
	require.NoError(t, err)
	w := newRecorder[billingArgs](want)
	ws := workers.NewRegistry()
	workers.Add(ws, w, nil)
	client, err := riverbus.NewClient(db, &riverbus.Config{Workers: ws})
	require.NoError(t, err)
	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() { require.NoError(t, client.Stop(context.Background())) })
	return w
}
