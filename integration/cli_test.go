package integration_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/internal/pgtest"
	"github.com/riverbus/riverbus/internal/pools"
	"github.com/riverbus/riverbus/internal/testwait"
	"github.com/riverbus/riverbus/outbox"
	"github.com/riverbus/riverbus/workers/webhook"
)

// riverbus work --webhook as a process: signed deliveries in key order,
// retries on 500, a dead letter after max attempts, and `dlq retry`
// delivering it again once the endpoint is fixed.
func TestWorkWebhookProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	t.Parallel()
	ctx := context.Background()
	dbURL := pgtest.NewDatabase(t)
	db := pgtest.Connect(t, dbURL)
	_, _, err := pools.Create(ctx, db, bustype.PoolParams{Name: "hooks", MaxAttempts: 3, Ordering: bustype.OrderingKey})
	require.NoError(t, err)

	secret := []byte("a-test-secret-of-some-length-000")
	var (
		mu       sync.Mutex
		received []outbox.Event
		failFor  = map[string]int{"poison": 1 << 30, "flaky": 2} // failures left per event type
		badSigs  int
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := webhook.Verify(secret, r.Header, body, time.Minute); err != nil {
			mu.Lock()
			badSigs++
			mu.Unlock()
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		var e outbox.Event
		require.NoError(t, json.Unmarshal(body, &e))
		mu.Lock()
		defer mu.Unlock()
		if failFor[e.Type] > 0 {
			failFor[e.Type]--
			http.Error(w, "not now", http.StatusInternalServerError)
			return
		}
		received = append(received, e)
	}))
	defer srv.Close()

	fan := start(t, dbURL, "riverbus", []string{"RIVERBUS_LOG_LEVEL=warn", "RIVERBUS_POLL_INTERVAL=100ms"}, "fanout")
	work := start(t, dbURL, "riverbus", []string{"HOOK_SECRET=" + string(secret), "RIVERBUS_LOG_LEVEL=error"},
		"work", "--pool", "hooks", "--webhook", srv.URL+"/events", "--secret-env", "HOOK_SECRET", "--concurrency", "4")
	work.waitOutput("delivering pool hooks", 30*time.Second)

	var want []int64
	for _, typ := range []string{"ok", "flaky", "ok", "poison", "ok"} {
		res, err := outbox.Append(ctx, db, outbox.Event{Type: typ, Key: "k", Data: json.RawMessage(`{}`)})
		require.NoError(t, err)
		if typ != "poison" {
			want = append(want, res[0].GlobalSequence)
		}
	}
	testwait.Eventually(t, 60*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(received) == len(want)
	}, "all but the poison event delivered")
	mu.Lock()
	var got []int64
	for _, e := range received {
		got = append(got, e.GlobalSequence)
	}
	require.Zero(t, badSigs)
	mu.Unlock()
	require.Equal(t, want, got, "key order held through the flaky event's retries and the dead letter (released)")

	dls, err := operator(t, db).DeadLetterList(ctx, bustype.DeadLetterListParams{Pool: "hooks"})
	require.NoError(t, err)
	require.Len(t, dls, 1)
	require.Contains(t, dls[0].LastError, "500")

	mu.Lock()
	failFor["poison"] = 0
	mu.Unlock()
	r := runCLI(t, dbURL, "dlq", "retry", "--pool", "hooks", "--all")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "retried 1 dead letter(s) of pool hooks")
	testwait.Eventually(t, 30*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(received) == len(want)+1 && received[len(received)-1].Type == "poison"
	}, "the dead letter delivered after retry")
	work.stop()
	fan.stop()

	// Bad input: an unknown pool lists the pools; a bad URL is a usage error.
	r = runCLI(t, dbURL, "work", "--pool", "nope", "--webhook", "http://127.0.0.1:1/x")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, `unknown pool "nope": pools are hooks`)
	r = runCLI(t, dbURL, "work", "--pool", "hooks", "--webhook", "ftp://x")
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, "URL")
	r = runCLI(t, dbURL, "work", "--pool", "hooks", "--webhook", "http://x", "--secret-env", "NOT_SET_ANYWHERE")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "NOT_SET_ANYWHERE")
}

// riverbus tail prints settled events in sequence order, filtered by pool.
func TestTailProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	t.Parallel()
	ctx := context.Background()
	dbURL := pgtest.NewDatabase(t)
	db := pgtest.Connect(t, dbURL)
	_, _, err := pools.Create(ctx, db, bustype.PoolParams{Name: "invoices", EventTypes: []string{"invoice.created"}})
	require.NoError(t, err)
	fan := start(t, dbURL, "riverbus", []string{"RIVERBUS_LOG_LEVEL=warn", "RIVERBUS_POLL_INTERVAL=100ms"}, "fanout")
	all := start(t, dbURL, "riverbus", nil, "tail", "--from", "0", "--json")
	invoices := start(t, dbURL, "riverbus", nil, "tail", "--from", "0", "--pool", "invoices")
	for _, typ := range []string{"order.placed", "invoice.created", "order.placed", "invoice.created"} {
		_, err := outbox.Append(ctx, db, outbox.Event{Type: typ, Key: "c1", Data: json.RawMessage(`{"n":1}`)})
		require.NoError(t, err)
	}
	testwait.Eventually(t, 30*time.Second, func() bool { return strings.Count(all.out.String(), "\n") >= 4 }, "four events tailed")
	var seqs []int64
	for _, line := range strings.Split(strings.TrimSpace(all.out.String()), "\n") {
		var e outbox.Event
		require.NoError(t, json.Unmarshal([]byte(line), &e), line)
		seqs = append(seqs, e.GlobalSequence)
	}
	require.Equal(t, []int64{1, 2, 3, 4}, seqs)
	testwait.Eventually(t, 30*time.Second, func() bool { return strings.Count(invoices.out.String(), "invoice.created") == 2 }, "two invoices tailed")
	require.NotContains(t, invoices.out.String(), "order.placed")

	// An appender's control characters reach the terminal escaped: no
	// cleared screen, no forged line.
	_, err = outbox.Append(ctx, db, outbox.Event{Type: "invoice.created", Key: "c2\x1b[2J\r\nlevel=ERROR msg=forged",
		Tags: []string{"note=\u202eevil"}, Data: json.RawMessage(`{"n":"\u001b[31m"}`)})
	require.NoError(t, err)
	testwait.Eventually(t, 30*time.Second, func() bool { return strings.Count(invoices.out.String(), "invoice.created") == 3 }, "the third invoice tailed")
	out := invoices.out.String()
	require.NotContains(t, out, "\x1b")
	require.NotContains(t, out, "\r")
	require.NotContains(t, out, "\u202e")
	require.NotContains(t, out, "\nlevel=ERROR")
	require.Contains(t, out, `key=c2\x1b[2J\x0d\x0alevel=ERROR msg=forged`)
	all.stop()
	invoices.stop()
	fan.stop()
}

type cliResult struct {
	code           int
	stdout, stderr string
}

// runCLI runs the riverbus binary to completion.
func runCLI(t *testing.T, dbURL string, args ...string) cliResult {
	t.Helper()
	return runCLIEnv(t, dbURL, nil, args...)
}

// riverbus dev: a throwaway, migrated database until SIGINT, then gone.
func TestDevProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("starts its own PostgreSQL")
	}
	t.Parallel()
	p := start(t, "", "riverbus", nil, "dev")
	p.waitOutput("Ctrl-C stops it", 3*time.Minute) // initdb and a server start, on a loaded machine
	m := regexp.MustCompile(`export DATABASE_URL='([^']+)'`).FindStringSubmatch(p.out.String())
	require.NotNil(t, m, p.out.String())
	r := runCLI(t, m[1], "pool", "create", "from-dev")
	require.Equal(t, 0, r.code, r.stdout)
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGINT))
	select {
	case <-p.done:
	case <-time.After(time.Minute):
		t.Fatal("riverbus dev did not stop within a minute")
	}
	require.NoError(t, p.err)
	// The server's files are gone. (Connecting again proves nothing: a
	// parallel test's server may have been given the same port since.)
	dir := regexp.MustCompile(`data in (\S+)\)`).FindStringSubmatch(p.out.String())
	require.NotNil(t, dir, p.out.String())
	_, err := os.Stat(dir[1])
	require.True(t, os.IsNotExist(err), "data directory %s left behind", dir[1])
}

// riverbus ui refuses a non-loopback address without credentials, and
// serves with them.
func TestUIBindRules(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewDatabase(t)
	r := runCLIEnv(t, dbURL, []string{"RIVERBUS_UI_ADDR=0.0.0.0:0"}, "ui")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stdout, "RIVERBUS_UI_USER")

	p := start(t, dbURL, "riverbus", []string{"RIVERBUS_UI_ADDR=127.0.0.1:0", "RIVERBUS_METRICS_ADDR=", "RIVERBUS_UI_USER=ops", "RIVERBUS_UI_PASSWORD=pw"}, "ui")
	p.waitOutput("River UI:", 30*time.Second)
	u := regexp.MustCompile(`River UI: (\S+)`).FindStringSubmatch(p.out.String())[1]
	resp, err := http.Get(u)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	req, _ := http.NewRequest(http.MethodGet, u, nil)
	req.SetBasicAuth("ops", "pw")
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	p.stop()
}

// The metrics endpoint has the UI's bind rule (its own credentials), and
// answers only to its own address.
func TestMetricsBindRules(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewDatabase(t)
	r := runCLIEnv(t, dbURL, []string{"RIVERBUS_UI_ADDR=127.0.0.1:0", "RIVERBUS_METRICS_ADDR=0.0.0.0:0"}, "ui")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stdout, "RIVERBUS_METRICS_USER")

	p := start(t, dbURL, "riverbus", []string{"RIVERBUS_UI_ADDR=127.0.0.1:0", "RIVERBUS_METRICS_ADDR=0.0.0.0:0",
		"RIVERBUS_METRICS_USER=prom", "RIVERBUS_METRICS_PASSWORD=pw"}, "ui")
	p.waitOutput("metrics:", 30*time.Second)
	u := regexp.MustCompile(`metrics: +(\S+)`).FindStringSubmatch(p.out.String())[1]
	u = strings.NewReplacer("0.0.0.0", "127.0.0.1", "[::]", "127.0.0.1").Replace(u)
	scrape := func(host string, auth bool) int {
		req, err := http.NewRequest(http.MethodGet, u, nil)
		require.NoError(t, err)
		if host != "" {
			req.Host = host
		}
		if auth {
			req.SetBasicAuth("prom", "pw")
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusUnauthorized, scrape("", false))
	require.Equal(t, http.StatusOK, scrape("", true))
	require.Equal(t, http.StatusForbidden, scrape("evil.example", true), "DNS rebinding")
	p.stop()
}

func runCLIEnv(t *testing.T, dbURL string, env []string, args ...string) cliResult {
	t.Helper()
	p := start(t, dbURL, "riverbus", env, args...)
	select {
	case <-p.done:
	case <-time.After(60 * time.Second):
		t.Fatalf("riverbus %v did not finish", args)
	}
	out := p.out.String()
	return cliResult{code: p.cmd.ProcessState.ExitCode(), stdout: out, stderr: out}
}
