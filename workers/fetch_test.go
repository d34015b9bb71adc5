package workers_test

import (
	"context"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/internal/jobtest"
	"github.com/riverbus/riverbus/internal/pgtest"
	"github.com/riverbus/riverbus/internal/testwait"
	"github.com/riverbus/riverbus/workers"
)

// River gives a fetch 10 s, then closes the connection and asks the
// server to cancel the statement. On a loaded server, or where the cancel
// request does not get through (a proxy that drops it, a server too busy
// to take the new connection in time), the fetch's UPDATE finishes all
// the same, and as a statement of its own it commits: the jobs it marked
// running have no worker until River's rescuer takes them, minutes later.
// A fetch through workers.Driver commits only once its rows are in hand,
// so the cut-short fetch rolls back and the job is worked at the next one.
//
// The first fetch that takes a job sleeps 12 s in a trigger (a sequence
// counts the fetches, as it is not rolled back with them), and the relay
// in front of the server refuses new connections, the cancel request
// among them, while it sleeps. The rescue is set far beyond the test's
// wait, so only a fetch that left nothing stranded passes.
func TestFetchCutShortAfterItsUpdateStrandsNoJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := pgtest.NewDatabase(t)
	db := pgtest.Connect(t, dbURL)
	jobtest.CreatePool(t, db, "payments", "payments", 5)
	_, err := db.Exec(ctx, `
		CREATE SEQUENCE slow_fetch;
		CREATE FUNCTION slow_fetch() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
		  IF nextval('slow_fetch') = 1 THEN PERFORM pg_sleep(12); END IF;
		  RETURN NEW;
		END $$;
		CREATE TRIGGER slow_fetch BEFORE UPDATE ON river_job FOR EACH ROW
		  WHEN (OLD.state = 'available' AND NEW.state = 'running') EXECUTE FUNCTION slow_fetch()`)
	require.NoError(t, err)
	id := jobtest.InsertEvents(t, db, "payments", jobtest.Event(1, "payment.settled", `{}`))[0]
	url := pgtest.Relay(t, dbURL, func(int64) bool {
		var sleeping bool
		err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND wait_event = 'PgSleep')`).Scan(&sleeping)
		return err == nil && !sleeping
	})
	relayed := pgtest.Connect(t, url)

	worked := make(chan int64, 10)
	ws := river.NewWorkers()
	river.AddWorker(ws, river.WorkFunc(func(_ context.Context, job *river.Job[paymentArgs]) error {
		worked <- job.ID
		return nil
	}))
	jobtest.StartClient(t, relayed, ws, map[string]int{"payments": 1}, &workers.RiverOpts{Config: workers.Config{JobTimeout: time.Minute, RescueStuckJobsAfter: 30 * time.Minute}})

	// A guard against a hang, well short of the rescue: 12 s of the
	// trigger's sleep, then a fetch poll.
	var j jobtest.Job
	testwait.Eventually(t, 2*time.Minute, func() bool {
		j, _ = jobtest.GetJob(t, db, id)
		return j.State == "completed"
	}, "job %d completed, not left running by the fetch that timed out (now %+v)", id, &j)
	require.Equal(t, id, <-worked)
	require.Equal(t, 1, j.Attempt, "the fetch that timed out rolled back: it took no attempt")
	var fetches int64
	require.NoError(t, db.QueryRow(ctx, `SELECT last_value FROM slow_fetch`).Scan(&fetches))
	require.EqualValues(t, 2, fetches, "the slow fetch, then the one that took the job")
}
