package cli_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/fanout"
	"github.com/riverbus/riverbus/internal/cli"
	"github.com/riverbus/riverbus/internal/jobtest"
	"github.com/riverbus/riverbus/internal/pgtest"
	"github.com/riverbus/riverbus/internal/testwait"
	"github.com/riverbus/riverbus/outbox"
)

// With completions failing (a full disk under river_job), `riverbus status`
// names the failing operation, in which process, how often and since
// when, and flags the pool whose jobs stay running beyond its workers. It
// used to show no error at all, and an ETA.
func TestStatusShowsFailingCompletions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := pgtest.NewDatabase(t)
	db := pgtest.Connect(t, dbURL)
	ok(t, run(t, dbURL, "pool", "create", "billing"))
	jobtest.FailLikeDiskFull(t, db, "test_disk_full", "river_job", jobtest.CompletionsOf("billing"))

	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
	defer hook.Close()
	workCtx, stop := context.WithCancel(ctx)
	var errOut lockedBuffer
	done := make(chan int, 1)
	go func() {
		done <- cli.MainContext(workCtx, []string{"--database-url", dbURL, "work", "--pool", "billing", "--webhook", hook.URL, "--concurrency", "2"}, io.Discard, &errOut)
	}()
	defer func() {
		stop()
		<-done
	}()

	for range 40 {
		_, err := outbox.Append(ctx, db, outbox.Event{Type: "invoice.created", Data: json.RawMessage(`{}`)})
		require.NoError(t, err)
	}
	f, err := fanout.New(db, &fanout.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	_, err = f.Pass(ctx)
	require.NoError(t, err)

	failing := regexp.MustCompile(`ERROR in riverbus work --pool billing \(pid \d+ on [^)]+\): River complete failed \d+ times? since \d\d:\d\d:\d\d, last \d+s ago: ".*No space left on device`)
	var last lockedBuffer // status's last output, for the failure message
	testwait.Eventually(t, 60*time.Second, func() bool {
		out := ok(t, run(t, dbURL, "status")).stdout
		last.b.Reset()
		last.b.WriteString(out)
		return failing.MatchString(out)
	}, "status does not name the failing completions; last output:\n%s\nwork's stderr:\n%s", &last, &errOut)

	// The worker keeps fetching while nothing completes: more jobs run
	// than its 2 slots can hold. Age them past checkpoint.StuckAfter, as a
	// minute of this would.
	testwait.Eventually(t, 30*time.Second, func() bool {
		var running int
		require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'billing' AND state = 'running'`).Scan(&running))
		return running > 4
	}, "the worker fetched no more than its slots")
	_, err = db.Exec(ctx, `UPDATE river_job SET attempted_at = attempted_at - interval '90 seconds' WHERE kind = 'billing' AND state = 'running'`)
	require.NoError(t, err)
	out := ok(t, run(t, dbURL, "status")).stdout
	require.Regexp(t, `billing: RUNNING ABOVE WORKERS: \d+ jobs running for over 1m0s, \d+ more than the 2 worker slots the processes report for queue "billing", so no worker runs them`, out)
}
