package riverbus_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus"
	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/internal/testwait"
	"github.com/riverbus/riverbus/outbox"
	"github.com/riverbus/riverbus/riverbustest"
	"github.com/riverbus/riverbus/workers"
)

// postingWorker POSTs to url and fails with net/http's error, which
// quotes the whole URL.
type postingWorker struct {
	river.WorkerDefaults[billingArgs]
	url string
}

func (w *postingWorker) Work(ctx context.Context, _ *river.Job[billingArgs]) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.url, strings.NewReader("{}"))
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	return nil
}

// A Go handler's error that quotes a URL with credentials (net/http's
// *url.Error does) is stored with them masked, and an error stored before
// (by an older worker) is shown masked by Status and DeadLetterList.
func TestHandlerErrorsNeverShowURLCredentials(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())

	admin, err := riverbus.NewClient(b.db, nil)
	require.NoError(t, err)
	for _, name := range []string{"billing", "audit"} {
		_, _, err := admin.PoolCreate(ctx, bustype.PoolParams{Name: name, MaxAttempts: 1})
		require.NoError(t, err)
	}
	ws := workers.NewRegistry()
	workers.Add(ws, &postingWorker{url: "http://user:hunter2-pw@" + addr + "/hook?token=s3cret-token"}, nil)
	client := riverbustest.StartClient(t, b.db, &riverbus.Config{Workers: ws})
	_, err = outbox.Append(ctx, b.db, outbox.Event{Type: "t", Data: json.RawMessage(`{}`)})
	require.NoError(t, err)
	_, err = b.db.Exec(ctx, `INSERT INTO river_job (args, kind, max_attempts, queue, state, errors, finalized_at)
		VALUES ('{"global_sequence": 1}', 'audit', 1, 'audit', 'discarded',
			ARRAY[jsonb_build_object('at', now(), 'attempt', 1, 'error', 'Post "https://ops:old-pass-word@h/x?key=old-token-value": EOF')], now())`)
	require.NoError(t, err)

	var dls []bustype.DeadLetter
	testwait.Eventually(t, 30*time.Second, func() bool {
		dls, err = client.DeadLetterList(ctx, bustype.DeadLetterListParams{})
		require.NoError(t, err)
		return len(dls) == 2
	}, "two dead letters")
	st, err := client.Status(ctx)
	require.NoError(t, err)
	stJSON, err := json.Marshal(st)
	require.NoError(t, err)
	dlJSON, err := json.Marshal(dls)
	require.NoError(t, err)
	var stored string
	require.NoError(t, b.db.QueryRow(ctx, `SELECT errors::text FROM river_job WHERE kind = 'billing'`).Scan(&stored))

	require.Contains(t, stored, `http://user:xxxxx@`+addr+`/hook?token=xxxxx`)
	require.Contains(t, st.Pool("audit").LastError, `https://ops:xxxxx@h/x?key=xxxxx`)
	for where, text := range map[string]string{"river_job.errors": stored, "Status": string(stJSON), "DeadLetterList": string(dlJSON)} {
		require.NotContains(t, text, "hunter2-pw", where)
		require.NotContains(t, text, "s3cret-token", where)
		if where != "river_job.errors" { // stored before: only shown masked
			require.NotContains(t, text, "old-pass-word", where)
			require.NotContains(t, text, "old-token-value", where)
		}
	}
}
