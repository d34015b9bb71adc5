package integration_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/fanout"
	"github.com/riverbus/riverbus/internal/pgtest"
	"github.com/riverbus/riverbus/internal/pools"
	"github.com/riverbus/riverbus/internal/testwait"
)

type attempt struct {
	jobID   int64
	attempt int
	worker  string
}

func attempts(t *testing.T, db *pgxpool.Pool) map[int64][]attempt {
	t.Helper()
	rows, err := db.Query(context.Background(), `SELECT sequence, job_id, attempt, worker FROM it_attempt ORDER BY at`)
	require.NoError(t, err)
	out := map[int64][]attempt{}
	var seq int64
	var a attempt
	_, err = pgx.ForEachRow(rows, []any{&seq, &a.jobID, &a.attempt, &a.worker}, func() error {
		out[seq] = append(out[seq], a)
		return nil
	})
	require.NoError(t, err)
	return out
}

// Three worker processes share one pool: every job is worked, first
// attempts that fail are retried, an event that fails every attempt ends as
// a dead letter that stays listed after River's cleaner would have deleted
// the job, and retrying it works it again. The checkpoint ends exact.
func TestCompetingWorkerProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	t.Parallel()
	ctx := context.Background()
	dbURL := pgtest.NewDatabase(t)
	db := pgtest.Connect(t, dbURL)
	_, _, err := pools.Create(ctx, db, bustype.PoolParams{Name: "shared", MaxAttempts: 3})
	require.NoError(t, err)

	const events = 600
	poison := int64(0)
	var last int64
	for i := range events {
		data := `{}`
		if i == 250 {
			data = `{"fail": true}`
		}
		require.NoError(t, db.QueryRow(ctx, `INSERT INTO riverbus_event (type, key, data) VALUES ('t', $1, $2) RETURNING global_sequence`,
			fmt.Sprintf("k%d", i%17), data).Scan(&last))
		if i == 250 {
			poison = last
		}
	}

	fan := start(t, dbURL, "riverbus", []string{"RIVERBUS_LOG_LEVEL=warn"}, "fanout")
	var ws []*proc
	for i := range 3 {
		w := start(t, dbURL, "testworker", nil, "-pool", "shared", "-id", fmt.Sprintf("w%d", i), "-fail-first-attempt-every", "10", "-concurrency", "4")
		w.waitOutput("ready", 30*time.Second)
		ws = append(ws, w)
	}

	testwait.Eventually(t, 90*time.Second, func() bool {
		var unfinished, total int
		require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state NOT IN ('completed', 'discarded')), count(*) FROM river_job WHERE kind = 'shared'`).Scan(&unfinished, &total))
		return total == events && unfinished == 0
	}, "every job finished")

	got := attempts(t, db)
	require.Len(t, got, events, "every event was worked")
	workersSeen := map[string]bool{}
	for seq, as := range got {
		for _, a := range as {
			workersSeen[a.worker] = true
		}
		switch {
		case seq == poison:
			require.Len(t, as, 3, "the poison event used all its attempts")
		case seq%10 == 0:
			require.Len(t, as, 2, "sequence %d: failed once, then retried", seq)
			require.Equal(t, 1, as[0].attempt)
			require.Equal(t, 2, as[1].attempt)
		default:
			require.Len(t, as, 1, "sequence %d worked once", seq)
		}
	}
	require.Len(t, workersSeen, 3, "all three processes took work")

	dls, err := operator(t, db).DeadLetterList(ctx, bustype.DeadLetterListParams{Pool: "shared"})
	require.NoError(t, err)
	require.Len(t, dls, 1)
	require.Equal(t, poison, dls[0].GlobalSequence)
	require.Contains(t, dls[0].LastError, "always fails")

	// The checkpoint is exact: discarded counts as finished.
	cp, err := operator(t, db).CheckpointGet(ctx, "shared")
	require.NoError(t, err)
	require.Equal(t, last, cp.Checkpoint)

	// River's cleaner deletes discarded jobs after its retention period;
	// the dead letter must survive that.
	_, err = db.Exec(ctx, `DELETE FROM river_job WHERE id = $1`, dls[0].JobID)
	require.NoError(t, err)
	dls, err = operator(t, db).DeadLetterList(ctx, bustype.DeadLetterListParams{Pool: "shared"})
	require.NoError(t, err)
	require.Len(t, dls, 1, "dead letter kept after its job row was deleted")

	// Retry it: the event is worked again (and fails again, as it always
	// does, ending once more as a dead letter).
	_, err = operator(t, db).DeadLetterRetry(ctx, dls[0].JobID)
	require.NoError(t, err)
	testwait.Eventually(t, 30*time.Second, func() bool {
		return len(attempts(t, db)[poison]) == 6
	}, "retried dead letter worked again")
	testwait.Eventually(t, 30*time.Second, func() bool {
		dls, err := operator(t, db).DeadLetterList(ctx, bustype.DeadLetterListParams{Pool: "shared"})
		require.NoError(t, err)
		return len(dls) == 1 && dls[0].JobID != 0
	}, "dead letter again")
	for _, w := range ws {
		w.stop()
	}
	fan.stop()
}

// Out-of-order commit end to end: tx A takes sequence N and waits, tx B
// takes N+1 and commits first, then A commits. Both reach the worker and the
// checkpoint is exactly N+1 once both jobs are finished — never N+1 while N
// is outstanding.
func TestOutOfOrderCommitCheckpointExact(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := pgtest.NewDatabase(t)
	db := pgtest.Connect(t, dbURL)
	_, _, err := pools.Create(ctx, db, bustype.PoolParams{Name: "ooo"})
	require.NoError(t, err)
	f, err := fanout.New(db, &fanout.Config{GapTimeout: time.Hour, Logger: discardLogger()})
	require.NoError(t, err)

	txA, err := db.Begin(ctx)
	require.NoError(t, err)
	defer txA.Rollback(ctx) //nolint:errcheck
	var n, n1 int64
	require.NoError(t, txA.QueryRow(ctx, `INSERT INTO riverbus_event (type, data) VALUES ('a', '{}') RETURNING global_sequence`).Scan(&n))
	require.NoError(t, db.QueryRow(ctx, `INSERT INTO riverbus_event (type, data) VALUES ('b', '{}') RETURNING global_sequence`).Scan(&n1))

	_, err = f.Pass(ctx)
	require.NoError(t, err)
	cp, err := operator(t, db).CheckpointGet(ctx, "ooo")
	require.NoError(t, err)
	require.Equal(t, n-1, cp.Checkpoint, "checkpoint never passes a held hole")

	require.NoError(t, txA.Commit(ctx))
	_, err = f.Pass(ctx)
	require.NoError(t, err)
	require.Equal(t, map[int64]int{n: 1, n1: 1}, jobCounts(t, db, "ooo"))

	// N+1's job finishes first: the checkpoint must stay below N.
	_, err = db.Exec(ctx, `UPDATE river_job SET state = 'completed', finalized_at = now() WHERE kind = 'ooo' AND (args->>'global_sequence')::bigint = $1`, n1)
	require.NoError(t, err)
	cp, err = operator(t, db).CheckpointGet(ctx, "ooo")
	require.NoError(t, err)
	require.Equal(t, n-1, cp.Checkpoint)

	_, err = db.Exec(ctx, `UPDATE river_job SET state = 'completed', finalized_at = now() WHERE kind = 'ooo'`)
	require.NoError(t, err)
	cp, err = operator(t, db).CheckpointGet(ctx, "ooo")
	require.NoError(t, err)
	require.Equal(t, n1, cp.Checkpoint)
}
