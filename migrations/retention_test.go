package migrations_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/internal/database"
	"github.com/riverbus/riverbus/internal/pools"
	"github.com/riverbus/riverbus/internal/retention"
	"github.com/riverbus/riverbus/migrations"
)

// Migration 015: a worker login applies the retention policy through the
// function, and may neither delete events itself, nor set the policy, nor
// move where the log begins; an application login may not even run the
// function or take the retention lock.
func TestRetentionRights(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupRoles(t)
	app := b.login(t, "riverbus_app")
	worker := b.login(t, "riverbus_worker")
	for range 10 { // a transaction each: retention deletes transactions whole
		_, err := b.owner.Exec(ctx, `INSERT INTO riverbus_event (type, data) VALUES ('thing.happened', '{}')`)
		require.NoError(t, err)
	}
	_, err := b.owner.Exec(ctx, `UPDATE riverbus_horizon SET horizon = 10`)
	require.NoError(t, err)
	_, _, err = pools.Create(ctx, b.owner, bustype.PoolParams{Name: "orders", From: bustype.FromSequence(6)})
	require.NoError(t, err)

	// No policy yet: the worker's pass deletes nothing.
	plan, err := retention.Trim(ctx, worker, nil)
	require.NoError(t, err)
	require.Equal(t, bustype.RetentionStopDisabled, plan.StoppedBy)

	requireDenied(t, worker,
		`DELETE FROM riverbus_event WHERE global_sequence = 1`,
		`UPDATE riverbus_retention SET enabled = true, keep = '0'`,
		`UPDATE riverbus_retention SET trimmed_through = 9`,
	)
	_, err = retention.SetPolicy(ctx, worker, true, 0)
	require.ErrorContains(t, err, "permission denied")
	_, err = retention.SetPolicy(ctx, b.owner, true, 0)
	require.NoError(t, err)

	// The worker applies it, as far as the pool lets it.
	plan, err = retention.Trim(ctx, worker, nil)
	require.NoError(t, err)
	require.Equal(t, int64(6), plan.Through, "%+v", plan)
	require.Equal(t, int64(6), plan.Events)
	// A worker resets pools, which takes the retention lock.
	p, err := pools.Reset(ctx, worker, "orders", 0)
	require.NoError(t, err)
	require.Equal(t, int64(6), p.Cursor)

	requireDenied(t, app,
		`SELECT * FROM riverbus_retention_step(0, NULL, NULL, 10, true)`,
		`SELECT * FROM riverbus_retention`,
	)
	var private string
	require.NoError(t, b.owner.QueryRow(ctx, `SELECT riverbus_private_schema()`).Scan(&private))
	for _, mode := range []string{"SHARE ROW EXCLUSIVE", "ROW EXCLUSIVE"} {
		err := pgx.BeginFunc(ctx, app, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "LOCK TABLE "+pgx.Identifier{private, "riverbus_retention_lock"}.Sanitize()+" IN "+mode+" MODE")
			return err
		})
		require.Equal(t, pgerrcode.InsufficientPrivilege, database.Code(err), "%s: %v", mode, err)
	}
}

// Migration 019: the database stamps when each event was appended, the time
// the keep period runs on, and an application login cannot choose it: a
// value it supplies, by INSERT or COPY, is overwritten with its
// transaction's start, and it may not change the stamp afterwards.
func TestAppenderCannotSetAppendedAt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupRoles(t)
	app := b.login(t, "riverbus_app")
	future := time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC)

	var txStart time.Time
	err := pgx.BeginFunc(ctx, app, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT transaction_timestamp()`).Scan(&txStart); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO riverbus_event (type, data, occurred_at, appended_at) VALUES ('by.insert', '{}', $1, $1)`, future); err != nil {
			return err
		}
		_, err := tx.CopyFrom(ctx, pgx.Identifier{"riverbus_event"}, []string{"type", "data", "occurred_at", "appended_at"},
			pgx.CopyFromRows([][]any{{"by.copy", "{}", future, future}}))
		return err
	})
	require.NoError(t, err)

	rows, err := app.Query(ctx, `SELECT type, occurred_at, appended_at FROM riverbus_event ORDER BY global_sequence`)
	require.NoError(t, err)
	type stamped struct {
		Type       string
		OccurredAt time.Time
		AppendedAt time.Time
	}
	events, err := pgx.CollectRows(rows, pgx.RowToStructByPos[stamped])
	require.NoError(t, err)
	require.Len(t, events, 2)
	for _, e := range events {
		require.True(t, future.Equal(e.OccurredAt), "%s: occurred_at is the application's to say", e.Type)
		require.True(t, txStart.Equal(e.AppendedAt), "%s: appended_at %s is the transaction's start %s", e.Type, e.AppendedAt, txStart)
	}
	requireDenied(t, app, `UPDATE riverbus_event SET appended_at = '2099-01-01'`)
}

// Migration 019 re-creates riverbus_retention_step, which runs as its
// owner, and riverbus_retention_holds, which it calls: neither resolves a
// name through a schema PUBLIC may write. Where PUBLIC may create in the
// schema (every database made before PostgreSQL 15), an application login
// plants an operator text || bigint, which would beat pg_catalog's
// polymorphic one in the holds' "pool job id" text; a retention step by a
// worker never runs it, as the owner or as the worker.
func TestRetentionFunctionsIgnorePlantedOperators(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupRoles(t)
	_, err := b.owner.Exec(ctx, `DO $$
BEGIN
  EXECUTE format('GRANT USAGE, CREATE ON SCHEMA %I TO PUBLIC', current_schema());
END
$$`)
	require.NoError(t, err)
	app := b.login(t, "riverbus_app")
	worker := b.login(t, "riverbus_worker")
	for _, sql := range []string{
		`CREATE TABLE rbt_ran (who text)`,
		`GRANT INSERT ON rbt_ran TO PUBLIC`,
		`CREATE FUNCTION rbt_cat(a text, b bigint) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO rbt_ran VALUES (current_user);
  RETURN a || b::text;
END
$$`,
		`CREATE OPERATOR || (LEFTARG = text, RIGHTARG = bigint, FUNCTION = rbt_cat)`,
	} {
		_, err := app.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	t.Cleanup(func() { // before the login's role is dropped
		_, err := b.owner.Exec(context.Background(), `DROP OPERATOR || (text, bigint); DROP FUNCTION rbt_cat(text, bigint); DROP TABLE rbt_ran`)
		require.NoError(t, err)
	})
	_, err = b.owner.Exec(ctx, `INSERT INTO riverbus_event (type, data) SELECT 'thing.happened', '{}' FROM generate_series(1, 10)`)
	require.NoError(t, err)
	_, err = b.owner.Exec(ctx, `INSERT INTO riverbus_dead_letter (job_id, pool, global_sequence, queue, args, attempt, max_attempts, priority)
		VALUES (1, 'p1', 8, 'p1', '{"global_sequence": 8, "undeliverable": "too deep"}', 0, 25, 1)`)
	require.NoError(t, err)
	_, err = retention.SetPolicy(ctx, b.owner, true, 0)
	require.NoError(t, err)

	plan, err := retention.Trim(ctx, worker, nil)
	require.NoError(t, err)
	require.Contains(t, plan.Holds, bustype.RetentionHold{Rule: "dead letter", Holder: "p1 job 1", Floor: 7})
	rows, err := b.owner.Query(ctx, `SELECT who FROM rbt_ran`)
	require.NoError(t, err)
	ran, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Empty(t, ran, "the planted operator ran as these roles")
}

// Migration 019 on a log that has events: it rewrites none of them. An
// event appended before it has no appended_at and keeps by the earlier of
// its occurred_at and the migration, so old history goes as it did, and an
// old event claiming to occur in 2099 is held a keep period after the
// upgrade, not until 2099. Events appended afterwards are stamped.
func TestAppendedAtOnAnExistingLog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := migratedBelow(t, 19)
	for _, occurred := range []string{"2000-01-01", "2099-01-01", "now"} {
		_, err := db.Exec(ctx, `INSERT INTO riverbus_event (type, data, occurred_at) VALUES ('before.upgrade', '{}', $1::timestamptz)`, occurred)
		require.NoError(t, err)
	}
	before := time.Now()
	res, err := migrations.Up(ctx, db)
	require.NoError(t, err)
	require.Contains(t, res.Riverbus, 19)
	_, err = db.Exec(ctx, `INSERT INTO riverbus_event (type, data, occurred_at) VALUES ('after.upgrade', '{}', '2099-01-01')`)
	require.NoError(t, err)

	var unstamped, stamped int
	var since time.Time
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FILTER (WHERE appended_at IS NULL), count(appended_at),
		(SELECT appended_at_since FROM riverbus_retention) FROM riverbus_event`).Scan(&unstamped, &stamped, &since))
	require.Equal(t, 3, unstamped, "the events before the upgrade are not rewritten")
	require.Equal(t, 1, stamped)
	require.WithinDuration(t, before, since, time.Minute)

	_, err = db.Exec(ctx, `UPDATE riverbus_horizon SET horizon = 4`)
	require.NoError(t, err)
	_, _, err = pools.Create(ctx, db, bustype.PoolParams{Name: "orders", From: bustype.FromSequence(4)})
	require.NoError(t, err)
	_, err = retention.SetPolicy(ctx, db, true, time.Hour)
	require.NoError(t, err)
	plan, err := retention.Trim(ctx, db, nil)
	require.NoError(t, err)
	require.Equal(t, int64(1), plan.Through, "the event of 2000 goes; the one of 2099 is kept an hour after the upgrade: %+v", plan)
	require.Equal(t, bustype.RetentionStopKeep, plan.StoppedBy)

	later := time.Now().Add(2 * time.Hour)
	plan, err = retention.Trim(ctx, db, &retention.Opts{Now: func() time.Time { return later }})
	require.NoError(t, err)
	require.Equal(t, int64(4), plan.Through, "%+v", plan)
	require.Equal(t, bustype.RetentionStopFloor, plan.StoppedBy)
}
