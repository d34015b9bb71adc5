package ui_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/internal/ui"
)

// serveGuarded serves River UI (with hopts) for b's database through
// ServeListener (so behind Guard) on listenAddr, and returns the listener's
// address.
func serveGuarded(t *testing.T, b *testBundle, listenAddr string, hopts ui.Opts, opts ui.ServeOpts) string {
	t.Helper()
	ctx := t.Context()
	hopts.Logger = b.logger
	h, err := ui.NewHandler(ctx, b.db, hopts)
	require.NoError(t, err)
	require.NoError(t, h.Start(ctx))
	t.Cleanup(h.Stop)
	ln, err := net.Listen("tcp", listenAddr)
	require.NoError(t, err)
	opts.Logger = b.logger
	srvCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() { done <- ui.ServeListener(srvCtx, ln, h, opts) }()
	t.Cleanup(func() {
		stop()
		require.NoError(t, <-done)
	})
	return ln.Addr().String()
}

// do sends one request to addr with the given Host header and extra
// headers, and returns the status and body.
func do(t *testing.T, method, addr, host, path, body string, header map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, "http://"+addr+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Host = host
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

func jobState(t *testing.T, db *pgxpool.Pool, id int64) string {
	t.Helper()
	var state string
	require.NoError(t, db.QueryRow(t.Context(), `SELECT state FROM river_job WHERE id = $1`, id).Scan(&state))
	return state
}

func billingJob(t *testing.T, db *pgxpool.Pool) int64 {
	t.Helper()
	var id int64
	require.NoError(t, db.QueryRow(t.Context(), `SELECT id FROM river_job WHERE kind = 'billing' ORDER BY id LIMIT 1`).Scan(&id))
	return id
}

// A page of another origin posts a "simple" request (text/plain, no
// preflight) to the API: refused, and the job is untouched. The same
// request from a program (no Origin, no Sec-Fetch-Site) goes through, so
// the refusal is the guard's, not a malformed request's.
func TestGuardRefusesCrossOriginStateChanges(t *testing.T) {
	t.Parallel()
	b := setup(t)
	addr := serveGuarded(t, b, "127.0.0.1:0", ui.Opts{}, ui.ServeOpts{})
	id := billingJob(t, b.db)
	body := `{"ids":["` + strconv.FormatInt(id, 10) + `"]}`

	for name, header := range map[string]map[string]string{
		"Origin":            {"Content-Type": "text/plain", "Origin": "http://evil.example"},
		"SecFetchSite":      {"Content-Type": "text/plain", "Sec-Fetch-Site": "cross-site"},
		"SameSiteOtherPort": {"Content-Type": "text/plain", "Sec-Fetch-Site": "same-site", "Origin": "http://127.0.0.1:1"},
	} {
		status, text := do(t, http.MethodPost, addr, addr, "/api/jobs/cancel", body, header)
		require.Equal(t, http.StatusForbidden, status, "%s: %s", name, text)
		require.Equal(t, "available", jobState(t, b.db, id), name)
	}
	for _, path := range []string{"/api/jobs/retry", "/api/jobs/delete"} {
		status, _ := do(t, http.MethodPost, addr, addr, path, body, map[string]string{"Content-Type": "text/plain", "Origin": "http://evil.example"})
		require.Equal(t, http.StatusForbidden, status, path)
		require.Equal(t, "available", jobState(t, b.db, id), path)
	}

	// Same origin (what River UI's own page sends) and a program: served.
	status, text := do(t, http.MethodPost, addr, addr, "/api/jobs/cancel", body,
		map[string]string{"Content-Type": "application/json", "Origin": "http://" + addr, "Sec-Fetch-Site": "same-origin"})
	require.Equal(t, http.StatusOK, status, text)
	require.Equal(t, "cancelled", jobState(t, b.db, id))
}

// DNS rebinding: a request that reached the server under another name is
// refused before River UI sees it, reads included.
func TestGuardRefusesForeignHost(t *testing.T) {
	t.Parallel()
	b := setup(t)
	addr := serveGuarded(t, b, "127.0.0.1:0", ui.Opts{}, ui.ServeOpts{AllowedHosts: []string{"riverbus.internal", "ops.example:8443"}})
	_, port, err := net.SplitHostPort(addr)
	require.NoError(t, err)

	for _, host := range []string{"evil.example:" + port, "evil.example", "127.0.0.2.evil.example:" + port,
		"127.0.0.1:1", "ops.example:" + port, "localhost.:1"} {
		status, body := do(t, http.MethodGet, addr, host, "/api/jobs?state=available", "", nil)
		require.Equal(t, http.StatusForbidden, status, "Host %q", host)
		require.NotContains(t, body, "billing", "Host %q", host)
	}
	for _, host := range []string{addr, "localhost:" + port, "LOCALHOST:" + port, "[::1]:" + port, "127.0.0.7:" + port,
		"riverbus.internal", "riverbus.internal:443", "ops.example:8443"} {
		status, body := do(t, http.MethodGet, addr, host, "/api/jobs?state=available", "", nil)
		require.Equal(t, http.StatusOK, status, "Host %q: %s", host, body)
		require.Contains(t, body, "billing", "Host %q", host)
	}
}

// On every interface, the address a request arrived on is the server's.
func TestGuardWildcardBind(t *testing.T) {
	t.Parallel()
	b := setup(t)
	addr := serveGuarded(t, b, "0.0.0.0:0", ui.Opts{}, ui.ServeOpts{})
	_, port, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	local := "127.0.0.1:" + port
	status, _ := do(t, http.MethodGet, local, local, "/api/jobs?state=available", "", nil)
	require.Equal(t, http.StatusOK, status)
	status, _ = do(t, http.MethodGet, local, "evil.example:"+port, "/api/jobs?state=available", "", nil)
	require.Equal(t, http.StatusForbidden, status)
}

func TestGuardAllowedHostsValidated(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"http://x", "x/y", "user@x", "x:1:2"} {
		_, err := ui.Guard(http.NotFoundHandler(), nil, []string{bad}, nil)
		require.ErrorIs(t, err, ui.ErrBadAllowedHost, bad)
	}
}
