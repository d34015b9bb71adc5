package workers

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/internal/pgtest"
)

// A fetch whose COMMIT reply is lost keeps the jobs the database shows it
// holding (running, at its attempt, by its client) and no other: not a job
// the commit did not take (back to available), nor one a later fetch of
// another client took after a rollback.
func TestFetchAfterALostCommitReplyKeepsWhatItHolds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewPool(t)
	_, err := db.Exec(ctx, `INSERT INTO river_job (args, kind, max_attempts, priority, queue, state)
		SELECT '{}', 'lost', 5, 1, 'lost', 'available' FROM generate_series(1, 3)`)
	require.NoError(t, err)

	exec := riverpgxv5.New(db).GetExecutor()
	params := &riverdriver.JobGetAvailableParams{ClientID: "client-a", MaxAttemptedBy: 100, MaxToLock: 10, Queue: "lost"}
	res, err := exec.JobGetAvailable(ctx, params)
	require.NoError(t, err)
	require.Len(t, res.Jobs, 3)
	held, notTaken, takenByB := res.Jobs[0].ID, res.Jobs[1].ID, res.Jobs[2].ID
	_, err = db.Exec(ctx, `UPDATE river_job SET state = 'available', attempt = 0, attempted_at = NULL, attempted_by = NULL WHERE id = $1`, notTaken)
	require.NoError(t, err)
	_, err = db.Exec(ctx, `UPDATE river_job SET attempted_at = now() + interval '1 second', attempted_by = '{client-b}' WHERE id = $1`, takenByB)
	require.NoError(t, err)

	e := &fetchExecutor{Executor: exec, logger: slog.New(slog.DiscardHandler)}
	lost := errors.New("commit reply lost")
	got, err := e.afterCommitFailed(ctx, params, res, lost)
	require.NoError(t, err)
	require.Len(t, got.Jobs, 1)
	require.Equal(t, held, got.Jobs[0].ID)

	// Nothing held: the commit's error, and no jobs.
	_, err = db.Exec(ctx, `UPDATE river_job SET state = 'available' WHERE id = $1`, held)
	require.NoError(t, err)
	got, err = e.afterCommitFailed(ctx, params, res, lost)
	require.ErrorIs(t, err, lost)
	require.Nil(t, got)
}

// A Driver built as a struct literal rather than by NewDriver has no
// logger of its own: its fetch and its listener log to slog.Default()
// instead of failing on a nil logger.
func TestDriverLiteralLogsToTheDefault(t *testing.T) {
	t.Parallel()
	d := &Driver{Driver: riverpgxv5.New(nil)}
	e, ok := d.GetExecutor().(*fetchExecutor)
	require.True(t, ok)
	require.Same(t, slog.Default(), e.logger)
}
