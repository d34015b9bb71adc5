package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/outbox"
)

// Twenty appenders decide on the same state and append with the same
// condition at the same time: exactly one wins, the others see its event.
func TestAppendIfTxConcurrentConflict(t *testing.T) {
	t.Parallel()
	ctx, bundle := setup(t)

	for iter := range 20 {
		course := fmt.Sprintf("course=%d", iter)
		seed, err := outbox.Append(ctx, bundle.db, event("CourseDefined", course))
		require.NoError(t, err)
		cond := outbox.AppendCondition{
			FailIfEventsMatch: outbox.Query{{Tags: []string{course}}},
			After:             seed[0].GlobalSequence,
			// Twenty racers queue for one lock; on a saturated machine the
			// last may wait past the default 5 s. Who wins is what counts.
			LockTimeout: time.Minute,
		}
		results := race(t, bundle.db, 20, func(ctx context.Context, tx pgx.Tx, i int) ([]outbox.Appended, error) {
			return outbox.AppendIfTx(ctx, tx, cond, event("StudentSubscribed", course, fmt.Sprintf("student=%d", i)))
		})
		won := winner(t, results, outbox.ErrConflict)
		winnerSeq := results[won].appended[0].GlobalSequence
		require.Greater(t, winnerSeq, seed[0].GlobalSequence)
		for i, r := range results {
			if i == won {
				continue
			}
			var conflict *outbox.ConflictError
			require.True(t, errors.As(r.err, &conflict), "racer %d: %v", i, r.err)
			require.Equal(t, winnerSeq, conflict.GlobalSequence, "racer %d", i)
			require.Equal(t, seed[0].GlobalSequence, conflict.After)
			require.Equal(t, cond.FailIfEventsMatch, conflict.Query)
		}
		events, err := outbox.Read(ctx, bundle.db, outbox.ReadParams{Query: cond.FailIfEventsMatch})
		require.NoError(t, err)
		require.Equal(t, []int64{seed[0].GlobalSequence, winnerSeq}, sequences(events))
		require.Equal(t, fmt.Sprintf("student=%d", won), events[1].Tags[1])
	}
}

// Twenty appenders run the same command at the same time: exactly one
// appends, the others find its events by the idempotency query.
func TestAppendIfTxConcurrentDuplicate(t *testing.T) {
	t.Parallel()
	ctx, bundle := setup(t)

	for iter := range 20 {
		idempotency := fmt.Sprintf("idempotency=request-%d", iter)
		cond := outbox.AppendCondition{IdempotencyQuery: outbox.Query{{Tags: []string{idempotency}}}, LockTimeout: time.Minute}
		results := race(t, bundle.db, 20, func(ctx context.Context, tx pgx.Tx, i int) ([]outbox.Appended, error) {
			return outbox.AppendIfTx(ctx, tx, cond,
				event("OrderPlaced", idempotency, "order=1"),
				event("PaymentRequested", idempotency, "order=1"))
		})
		won := winner(t, results, outbox.ErrDuplicate)
		first := results[won].appended[0].GlobalSequence
		require.Equal(t, first+1, results[won].appended[1].GlobalSequence)
		for i, r := range results {
			if i == won {
				continue
			}
			var dup *outbox.DuplicateError
			require.True(t, errors.As(r.err, &dup), "racer %d: %v", i, r.err)
			require.Equal(t, first, dup.GlobalSequence, "racer %d", i)
			require.Equal(t, cond.IdempotencyQuery, dup.Query)
		}
		events, err := outbox.Read(ctx, bundle.db, outbox.ReadParams{Query: cond.IdempotencyQuery})
		require.NoError(t, err)
		require.Equal(t, []int64{first, first + 1}, sequences(events))
	}
	require.Equal(t, 40, countEvents(t, bundle.db))
}

// Conditions over disjoint tags do not wait for each other: the second
// appends while the first still holds its locks.
func TestAppendIfTxDisjointConditionsDoNotWait(t *testing.T) {
	t.Parallel()
	ctx, bundle := setup(t)

	txA, err := bundle.db.Begin(ctx)
	require.NoError(t, err)
	defer txA.Rollback(ctx) //nolint:errcheck
	a, err := outbox.AppendIfTx(ctx, txA,
		outbox.AppendCondition{FailIfEventsMatch: outbox.Query{{Types: []string{"StudentSubscribed"}, Tags: []string{"course=a"}}}},
		event("StudentSubscribed", "course=a", "student=1"))
	require.NoError(t, err)

	waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	txB, err := bundle.db.Begin(waitCtx)
	require.NoError(t, err)
	defer txB.Rollback(ctx) //nolint:errcheck
	b, err := outbox.AppendIfTx(waitCtx, txB,
		outbox.AppendCondition{FailIfEventsMatch: outbox.Query{{Types: []string{"StudentSubscribed"}, Tags: []string{"course=b"}}}},
		event("StudentSubscribed", "course=b", "student=1"))
	require.NoError(t, err, "the second appender waited for the first")

	require.NoError(t, txB.Commit(ctx))
	require.NoError(t, txA.Commit(ctx))
	require.Equal(t, []int64{1, 2}, []int64{a[0].GlobalSequence, b[0].GlobalSequence})
	require.Equal(t, 2, countEvents(t, bundle.db))
}

// Two appenders with different condition tags still exclude each other when
// the events of one match the condition of the other: A's event carries
// course=1, which B's condition is about. B waits for A, then conflicts.
func TestAppendIfTxOverlappingEventsSerialize(t *testing.T) {
	t.Parallel()
	ctx, bundle := setup(t)

	txA, err := bundle.db.Begin(ctx)
	require.NoError(t, err)
	defer txA.Rollback(ctx) //nolint:errcheck
	a, err := outbox.AppendIfTx(ctx, txA,
		outbox.AppendCondition{FailIfEventsMatch: outbox.Query{{Tags: []string{"student=a"}}}},
		event("StudentSubscribed", "course=1", "student=a"))
	require.NoError(t, err)

	type result struct {
		appended []outbox.Appended
		err      error
	}
	done := make(chan result, 1)
	go func() {
		var r result
		r.err = pgx.BeginFunc(ctx, bundle.db, func(tx pgx.Tx) error {
			r.appended, r.err = outbox.AppendIfTx(ctx, tx,
				outbox.AppendCondition{FailIfEventsMatch: outbox.Query{{Tags: []string{"course=1"}}}},
				event("StudentSubscribed", "course=1", "student=b"))
			return r.err
		})
		done <- r
	}()

	// B is blocked on one of A's locks.
	require.Eventually(t, func() bool {
		var waiting int
		err := bundle.db.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND cardinality(pg_blocking_pids(pid)) > 0`).Scan(&waiting)
		return err == nil && waiting == 1
	}, 10*time.Second, 5*time.Millisecond)
	select {
	case r := <-done:
		t.Fatalf("B returned while A held its locks: %+v", r)
	default:
	}

	require.NoError(t, txA.Commit(ctx))
	r := <-done
	var conflict *outbox.ConflictError
	require.True(t, errors.As(r.err, &conflict), "%v", r.err)
	require.Equal(t, a[0].GlobalSequence, conflict.GlobalSequence)
	require.Equal(t, 1, countEvents(t, bundle.db))
}

func TestAppendIfTxCondition(t *testing.T) {
	t.Parallel()
	ctx, bundle := setup(t)

	_, err := outbox.Append(ctx, bundle.db,
		event("CourseDefined", "course=c1"),                                     // 1
		event("CourseDefined", "course=c2"),                                     // 2
		event("StudentSubscribed", "course=c1", "student=s1", "idempotency=r1"), // 3
	)
	require.NoError(t, err)

	conflictAt := func(t *testing.T, err error) int64 {
		t.Helper()
		require.ErrorIs(t, err, outbox.ErrConflict)
		var conflict *outbox.ConflictError
		require.True(t, errors.As(err, &conflict))
		return conflict.GlobalSequence
	}
	courseC1 := outbox.Query{{Tags: []string{"course=c1"}}}

	t.Run("ConflictAboveAfter", func(t *testing.T) {
		_, err := outbox.AppendIf(ctx, bundle.db, outbox.AppendCondition{FailIfEventsMatch: courseC1, After: 0}, event("X"))
		require.Equal(t, int64(1), conflictAt(t, err), "the lowest matching sequence above After")
		_, err = outbox.AppendIf(ctx, bundle.db, outbox.AppendCondition{FailIfEventsMatch: courseC1, After: 1}, event("X"))
		require.Equal(t, int64(3), conflictAt(t, err))
		require.EqualError(t, err, "outbox: append condition failed: event 3 matches the query after position 1")
	})
	t.Run("TypesOnly", func(t *testing.T) {
		_, err := outbox.AppendIf(ctx, bundle.db, outbox.AppendCondition{FailIfEventsMatch: outbox.Query{{Types: []string{"Nope", "CourseDefined"}}}, After: 1}, event("X"))
		require.Equal(t, int64(2), conflictAt(t, err))
	})
	t.Run("TypesAndTags", func(t *testing.T) {
		_, err := outbox.AppendIf(ctx, bundle.db, outbox.AppendCondition{FailIfEventsMatch: outbox.Query{{Types: []string{"StudentSubscribed"}, Tags: []string{"course=c2"}}}}, event("X"))
		require.NoError(t, err)
	})
	t.Run("AnyItem", func(t *testing.T) {
		q := outbox.Query{{Types: []string{"Nope"}}, {Tags: []string{"course=c2"}}, {Tags: []string{"student=s1", "course=c1"}}}
		_, err := outbox.AppendIf(ctx, bundle.db, outbox.AppendCondition{FailIfEventsMatch: q, After: 2}, event("X"))
		require.Equal(t, int64(3), conflictAt(t, err))
	})
	t.Run("DuplicateBeforeConflict", func(t *testing.T) {
		_, err := outbox.AppendIf(ctx, bundle.db, outbox.AppendCondition{
			FailIfEventsMatch: courseC1,
			IdempotencyQuery:  outbox.Query{{Types: []string{"StudentSubscribed"}, Tags: []string{"idempotency=r1"}}},
		}, event("X"))
		require.ErrorIs(t, err, outbox.ErrDuplicate)
		var dup *outbox.DuplicateError
		require.True(t, errors.As(err, &dup))
		require.Equal(t, int64(3), dup.GlobalSequence)
		require.Equal(t, "outbox: duplicate: event 3 matches the idempotency query", dup.Error())
	})
	t.Run("TxUsableAfterConflict", func(t *testing.T) {
		tx, err := bundle.db.Begin(ctx)
		require.NoError(t, err)
		defer tx.Rollback(ctx) //nolint:errcheck
		_, err = outbox.AppendIfTx(ctx, tx, outbox.AppendCondition{FailIfEventsMatch: courseC1}, event("Y"))
		require.ErrorIs(t, err, outbox.ErrConflict)
		appended, err := outbox.AppendTx(ctx, tx, event("Compensated"))
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))
		events, err := outbox.Read(ctx, bundle.db, outbox.ReadParams{Query: outbox.Query{{Types: []string{"Y", "Compensated"}}}})
		require.NoError(t, err)
		require.Equal(t, []int64{appended[0].GlobalSequence}, sequences(events))
	})
	t.Run("RepeatableReadRefused", func(t *testing.T) {
		before := countEvents(t, bundle.db)
		tx, err := bundle.db.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
		require.NoError(t, err)
		defer tx.Rollback(ctx) //nolint:errcheck
		_, err = outbox.AppendIfTx(ctx, tx, outbox.AppendCondition{FailIfEventsMatch: outbox.Query{{Tags: []string{"course=none"}}}}, event("Z"))
		require.EqualError(t, err, "outbox: AppendIfTx needs READ COMMITTED or SERIALIZABLE isolation, the transaction is repeatable read")
		require.NoError(t, tx.Commit(ctx))
		require.Equal(t, before, countEvents(t, bundle.db))
	})
	t.Run("Serializable", func(t *testing.T) {
		tx, err := bundle.db.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.Serializable})
		require.NoError(t, err)
		defer tx.Rollback(ctx) //nolint:errcheck
		appended, err := outbox.AppendIfTx(ctx, tx, outbox.AppendCondition{FailIfEventsMatch: outbox.Query{{Tags: []string{"course=none"}}}}, event("S1", "course=none"), event("S2", "course=none"))
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))
		require.Equal(t, appended[0].GlobalSequence+1, appended[1].GlobalSequence)
	})
}

// A conditional appender whose locks are held longer than its LockTimeout
// by another appender's open transaction fails, naming that session, and
// its transaction is left to roll back; the holder is unharmed.
func TestAppendIfTxLockWaitNamesTheHolder(t *testing.T) {
	t.Parallel()
	ctx, bundle := setup(t)
	cond := outbox.AppendCondition{FailIfEventsMatch: outbox.Query{{Tags: []string{"course=1"}}}}

	holder, err := bundle.db.Acquire(ctx)
	require.NoError(t, err)
	defer holder.Release()
	_, err = holder.Exec(ctx, "SET application_name = 'slow appender'")
	require.NoError(t, err)
	txA, err := holder.Begin(ctx)
	require.NoError(t, err)
	defer txA.Rollback(ctx) //nolint:errcheck
	_, err = outbox.AppendIfTx(ctx, txA, cond, event("StudentSubscribed", "course=1", "student=a"))
	require.NoError(t, err)

	// Long enough for the holder to be looked up on a saturated machine.
	cond.LockTimeout = 3 * time.Second
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err = outbox.AppendIf(waitCtx, bundle.db, cond, event("StudentSubscribed", "course=1", "student=b"))
	require.Error(t, err)
	require.Contains(t, err.Error(), fmt.Sprintf(`append if: lock append condition: waited 3s for row lock on riverbus_private_public.riverbus_append_lock held by pid %d (role `,
		holder.Conn().PgConn().PID()))
	require.Contains(t, err.Error(), `application_name "slow appender", idle in transaction for `)

	require.NoError(t, txA.Commit(ctx))
	require.Equal(t, 1, countEvents(t, bundle.db))
}
