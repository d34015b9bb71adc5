package ui_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus"
	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/internal/pgtest"
	"github.com/riverbus/riverbus/internal/pools"
	"github.com/riverbus/riverbus/internal/testwait"
	"github.com/riverbus/riverbus/internal/ui"
	"github.com/riverbus/riverbus/outbox"
	"github.com/riverbus/riverbus/riverbustest"
	"github.com/riverbus/riverbus/workers"
)

// Attacker-controlled text: the handler's error and the event's key (an
// ordered pool's lane) reach the page.
const (
	hostileError = `<script>window.pwned = "error"</script>`
	hostileKey   = `<img src=x onerror="window.pwned='key'">`
)

type ledgerArgs struct{ workers.Args }

func (ledgerArgs) Kind() string { return "ledger" }

// ledgerWorker fails every job with hostileError.
type ledgerWorker struct {
	river.WorkerDefaults[ledgerArgs]
}

func (ledgerWorker) Work(context.Context, *river.Job[ledgerArgs]) error {
	return errors.New(hostileError)
}

// pageBundle is a database where the riverbus page has something to show:
// "billing" is paused, 3 events behind; "ledger" (ordered by key) is
// stalled: its first job, holding the checkpoint, failed its first attempt
// of 5 with hostileError and waits an hour for the next.
type pageBundle struct {
	*testBundle
	client *riverbus.Client
	holder int64 // ledger's holding job
}

func pageSetup(t *testing.T) *pageBundle {
	t.Helper()
	ctx := t.Context()
	b := &testBundle{db: pgtest.NewPool(t), logger: slog.New(slog.DiscardHandler)}
	admin, err := riverbus.NewClient(b.db, &riverbus.Config{Logger: b.logger})
	require.NoError(t, err)
	for _, p := range []bustype.PoolParams{
		{Name: "billing"},
		{Name: "ledger", Ordering: bustype.OrderingKey, MaxAttempts: 5, Retry: bustype.RetrySchedule{Base: time.Hour}},
	} {
		_, _, err := admin.PoolCreate(ctx, p)
		require.NoError(t, err)
	}
	_, err = admin.PoolPause(ctx, "billing")
	require.NoError(t, err)

	ws := workers.NewRegistry()
	workers.Add(ws, ledgerWorker{}, nil)
	client := riverbustest.StartClient(t, b.db, &riverbus.Config{Workers: ws, Logger: b.logger, Work: workers.Config{Logger: b.logger}})
	for range 3 {
		appendEvent(t, b)
	}
	pb := &pageBundle{testBundle: b, client: client}
	testwait.Eventually(t, 30*time.Second, func() bool {
		st, err := client.Status(ctx)
		require.NoError(t, err)
		h := st.Pool("ledger").Holder
		if st.Pool("billing").Lag != 3 || h == nil || h.Attempt != 1 || h.State != bustype.JobStateRetryable {
			return false
		}
		pb.holder = h.ID
		return true
	}, "billing did not reach lag 3, or ledger's first job did not fail")
	return pb
}

// appendEvent appends an event with hostileKey as its key.
func appendEvent(t *testing.T, b *testBundle) {
	t.Helper()
	_, err := outbox.Append(t.Context(), b.db, outbox.Event{Type: "invoice.paid", Key: hostileKey, Data: json.RawMessage(`{"amount": 42}`)})
	require.NoError(t, err)
}

func TestPage(t *testing.T) {
	t.Parallel()
	b := pageSetup(t)

	t.Run("ShowsPoolsEscaped", func(t *testing.T) {
		t.Parallel()
		srv := newServer(t, b.testBundle, ui.Opts{})
		resp, body := get(t, srv.URL+ui.PagePath, nil)
		require.Equal(t, http.StatusOK, resp.StatusCode, body)
		require.Equal(t, "text/html; charset=utf-8", resp.Header.Get("Content-Type"))
		require.Contains(t, resp.Header.Get("Content-Security-Policy"), "script-src 'self'")
		require.Equal(t, "no-store", resp.Header.Get("Cache-Control"))

		require.Contains(t, body, `data-pool="billing" data-condition="paused"`)
		require.Contains(t, body, `data-field="lag">3 events, oldest appended`)
		require.Contains(t, body, `data-pool="ledger" data-condition="stalled"`)
		id := strconv.FormatInt(b.holder, 10)
		require.Contains(t, body, `<a href="/jobs/`+id+`">job `+id+`</a>`, "the holder links to River UI's job page")
		require.Contains(t, body, `attempt 1/5`)
		require.Contains(t, body, `<a href="/queues/ledger">ledger</a>`, "the queue links to River UI's queue page")
		require.Contains(t, body, `up to 5 attempts; base=1h0m0s`)

		// The error and the lane are text, never markup.
		require.NotContains(t, body, "<script>window")
		require.NotContains(t, body, "<img")
		require.Contains(t, body, `&lt;script&gt;window.pwned = &#34;error&#34;&lt;/script&gt;`)
		require.Contains(t, body, `&lt;img src=x onerror=&#34;window.pwned=&#39;key&#39;&#34;&gt;`)

		// The live part, as the script fetches it.
		resp, live := get(t, srv.URL+ui.PagePath+"live", nil)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Contains(t, live, `data-pool="ledger" data-condition="stalled"`)
		require.NotContains(t, live, "<html")
		require.NotContains(t, live, "<script")

		resp, js := get(t, srv.URL+ui.PagePath+"page.js", nil)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Contains(t, resp.Header.Get("Content-Type"), "javascript")
		require.Contains(t, js, "setTimeout(refresh")

		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+ui.PagePath, nil)
		require.NoError(t, err)
		post, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		post.Body.Close()
		require.Equal(t, http.StatusMethodNotAllowed, post.StatusCode)

		resp, _ = get(t, srv.URL+ui.PagePath+"nope", nil)
		require.Equal(t, http.StatusNotFound, resp.StatusCode)
	})

	// River UI's HTML documents carry a link to the page; its API and
	// assets are untouched.
	t.Run("RiverUILinksToPage", func(t *testing.T) {
		t.Parallel()
		srv := newServer(t, b.testBundle, ui.Opts{})
		for _, path := range []string{"/", "/jobs?state=available", "/queues/ledger"} {
			resp, body := get(t, srv.URL+path, nil)
			require.Equal(t, http.StatusOK, resp.StatusCode, path)
			require.Contains(t, body, `<a id="riverbus-page-link" href="/riverbus/"`, path)
			require.Less(t, strings.Index(body, `id="riverbus-page-link"`), strings.LastIndex(body, "</body>"), path)
			require.Equal(t, strconv.Itoa(len(body)), resp.Header.Get("Content-Length"), path)
			require.Empty(t, resp.Header.Get("Content-Security-Policy"), "River UI sends none, so the link's inline style applies")
		}
		resp, body := get(t, srv.URL+"/api/jobs?state=retryable", nil)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Contains(t, body, `"kind":"ledger"`)
		require.NotContains(t, body, "riverbus-page-link")
		resp, body = get(t, srv.URL+"/favicon.ico", nil)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.NotContains(t, body, "riverbus-page-link")

		// Under a prefix, the page links into River UI there.
		srv = newServer(t, b.testBundle, ui.Opts{Prefix: "/riverui"})
		_, body = get(t, srv.URL+ui.PagePath, nil)
		require.Contains(t, body, `<a href="/riverui/queues/ledger">ledger</a>`)
		_, body = get(t, srv.URL+"/riverui/", nil)
		require.Contains(t, body, `id="riverbus-page-link" href="/riverbus/"`)
	})

	t.Run("BasicAuth", func(t *testing.T) {
		t.Parallel()
		srv := newServer(t, b.testBundle, ui.Opts{User: "ops", Password: "s3cret"})
		for _, path := range []string{ui.PagePath, ui.PagePath + "live", ui.PagePath + "page.js", "/riverbus"} {
			resp, body := get(t, srv.URL+path, nil)
			require.Equal(t, http.StatusUnauthorized, resp.StatusCode, path)
			require.NotContains(t, body, "ledger")
			resp, _ = get(t, srv.URL+path, func(r *http.Request) { r.SetBasicAuth("ops", "wrong") })
			require.Equal(t, http.StatusUnauthorized, resp.StatusCode, path)
		}
		resp, body := get(t, srv.URL+ui.PagePath, func(r *http.Request) { r.SetBasicAuth("ops", "s3cret") })
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Contains(t, body, `data-pool="ledger"`)
	})

	// A DNS-rebinding page asks for the riverbus page by its own name:
	// refused, as for River UI.
	t.Run("ForeignHost", func(t *testing.T) {
		t.Parallel()
		addr := serveGuarded(t, b.testBundle, "127.0.0.1:0", ui.Opts{}, ui.ServeOpts{})
		_, port, _ := strings.Cut(addr, ":")
		for _, path := range []string{ui.PagePath, ui.PagePath + "live"} {
			code, body := do(t, http.MethodGet, addr, "evil.example:"+port, path, "", nil)
			require.Equal(t, http.StatusForbidden, code, path)
			require.NotContains(t, body, "ledger")
			code, body = do(t, http.MethodGet, addr, "localhost:"+port, path, "", nil)
			require.Equal(t, http.StatusOK, code, path)
			require.Contains(t, body, `data-pool="ledger"`)
		}
	})

	t.Run("StatusError", func(t *testing.T) {
		t.Parallel()
		srv := newServer(t, b.testBundle, ui.Opts{StatusFunc: func(context.Context) (*riverbus.Status, error) {
			return nil, errors.New("database <down>")
		}})
		resp, body := get(t, srv.URL+ui.PagePath, nil)
		require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
		require.Contains(t, body, "Cannot read the status: <span class=\"err\">database &lt;down&gt;</span>")
	})

	t.Run("PrefixTaken", func(t *testing.T) {
		t.Parallel()
		_, err := ui.NewHandler(t.Context(), b.db, ui.Opts{Prefix: "/riverbus"})
		require.ErrorContains(t, err, "taken by the riverbus page")
	})
}

// A pool's checkpoint time (when the event at its checkpoint was
// appended) is on the page, in UTC as `pool reset --to-time` takes it; a
// pool at no event shows none.
func TestPageShowsCheckpointTime(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := pools.Reset(t.Context(), b.db, "billing", 1)
	require.NoError(t, err)
	var appended time.Time
	require.NoError(t, b.db.QueryRow(t.Context(), `SELECT appended_at FROM riverbus_event WHERE global_sequence = 1`).Scan(&appended))
	_, _, err = pools.Create(t.Context(), b.db, bustype.PoolParams{Name: "audit", From: bustype.FromSequence(0)})
	require.NoError(t, err)

	srv := newServer(t, b, ui.Opts{})
	_, body := get(t, srv.URL+ui.PagePath, nil)
	require.Contains(t, body, `data-field="checkpoint-time"`)
	require.Contains(t, body, ">"+appended.UTC().Format(time.RFC3339)+"</dd>")
	require.Equal(t, 1, strings.Count(body, `data-field="checkpoint-time"`), "the pool at sequence 0 shows a time")
}
