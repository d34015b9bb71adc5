package ui_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/fanout"
	"github.com/riverbus/riverbus/internal/pgtest"
	"github.com/riverbus/riverbus/internal/pools"
	"github.com/riverbus/riverbus/internal/ui"
)

type testBundle struct {
	db     *pgxpool.Pool
	logger *slog.Logger
}

// setup returns a fresh database with a pool "billing" that has one
// available job.
func setup(t *testing.T) *testBundle {
	t.Helper()
	ctx := t.Context()
	db := pgtest.NewPool(t)
	_, _, err := pools.Create(ctx, db, bustype.PoolParams{Name: "billing"})
	require.NoError(t, err)
	_, err = db.Exec(ctx, `INSERT INTO riverbus_event (type, key, data) VALUES ('invoice.paid', 'inv-1', '{"amount": 42}')`)
	require.NoError(t, err)
	f, err := fanout.New(db, &fanout.Config{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	_, err = f.Pass(ctx)
	require.NoError(t, err)
	return &testBundle{db: db, logger: slog.New(slog.DiscardHandler)}
}

// newServer starts a Handler with opts behind an httptest server.
func newServer(t *testing.T, b *testBundle, opts ui.Opts) *httptest.Server {
	t.Helper()
	opts.Logger = b.logger
	h, err := ui.NewHandler(t.Context(), b.db, opts)
	require.NoError(t, err)
	require.NoError(t, h.Start(t.Context()))
	t.Cleanup(h.Stop)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

func get(t *testing.T, url string, setAuth func(*http.Request)) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	require.NoError(t, err)
	if setAuth != nil {
		setAuth(req)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, string(body)
}

type jobList struct {
	Data []struct {
		ID    int64  `json:"id"`
		Kind  string `json:"kind"`
		State string `json:"state"`
		Args  string `json:"args"` // River UI sends the args as a JSON string
	} `json:"data"`
}

func TestHandler(t *testing.T) {
	t.Parallel()

	t.Run("ServesIndexAndJobs", func(t *testing.T) {
		t.Parallel()
		srv := newServer(t, setup(t), ui.Opts{})

		resp, body := get(t, srv.URL+"/", nil)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Contains(t, resp.Header.Get("Content-Type"), "text/html")
		require.Contains(t, body, "<title>River</title>")

		// A front-end route is served the index too.
		resp, body = get(t, srv.URL+"/jobs?state=available", nil)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Contains(t, body, `<div id="root"`)

		resp, body = get(t, srv.URL+"/api/jobs?state=available", nil)
		require.Equal(t, http.StatusOK, resp.StatusCode, body)
		var list jobList
		require.NoError(t, json.Unmarshal([]byte(body), &list))
		require.Len(t, list.Data, 1)
		require.Equal(t, "billing", list.Data[0].Kind)
		require.Equal(t, "available", list.Data[0].State)
		var args struct {
			GlobalSequence int64  `json:"global_sequence"`
			Type           string `json:"type"`
		}
		require.NoError(t, json.Unmarshal([]byte(list.Data[0].Args), &args))
		require.Equal(t, int64(1), args.GlobalSequence)
		require.Equal(t, "invoice.paid", args.Type)
	})

	t.Run("Prefix", func(t *testing.T) {
		t.Parallel()
		srv := newServer(t, setup(t), ui.Opts{Prefix: "/riverui"})

		resp, body := get(t, srv.URL+"/riverui/api/jobs?state=available", nil)
		require.Equal(t, http.StatusOK, resp.StatusCode, body)
		require.Contains(t, body, `"kind":"billing"`)

		resp, body = get(t, srv.URL+"/riverui/", nil)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Contains(t, body, `/riverui/assets/`)

		resp, _ = get(t, srv.URL+"/api/jobs", nil)
		require.Equal(t, http.StatusNotFound, resp.StatusCode)
	})

	t.Run("BasicAuth", func(t *testing.T) {
		t.Parallel()
		srv := newServer(t, setup(t), ui.Opts{User: "ops", Password: "s3cret"})

		for _, path := range []string{"/", "/jobs?state=available", "/api/jobs?state=available", "/api/health-checks/minimal", "/favicon.ico"} {
			for name, setAuth := range map[string]func(*http.Request){
				"none":           nil,
				"wrong user":     func(r *http.Request) { r.SetBasicAuth("root", "s3cret") },
				"wrong password": func(r *http.Request) { r.SetBasicAuth("ops", "s3cre") },
				"bearer":         func(r *http.Request) { r.Header.Set("Authorization", "Bearer s3cret") },
			} {
				resp, body := get(t, srv.URL+path, setAuth)
				require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "%s with %s credentials", path, name)
				require.Equal(t, `Basic realm="riverbus", charset="UTF-8"`, resp.Header.Get("WWW-Authenticate"))
				require.NotContains(t, body, "billing")
			}
		}

		right := func(r *http.Request) { r.SetBasicAuth("ops", "s3cret") }
		resp, body := get(t, srv.URL+"/", right)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Contains(t, body, "<title>River</title>")
		resp, body = get(t, srv.URL+"/api/jobs?state=available", right)
		require.Equal(t, http.StatusOK, resp.StatusCode, body)
		require.Contains(t, body, `"kind":"billing"`)
	})

	t.Run("UserWithoutPassword", func(t *testing.T) {
		t.Parallel()
		db := pgtest.NewPool(t)
		_, err := ui.NewHandler(t.Context(), db, ui.Opts{User: "ops"})
		require.ErrorContains(t, err, "User and Password must be set together")
	})

	t.Run("StartStop", func(t *testing.T) {
		t.Parallel()
		h, err := ui.NewHandler(t.Context(), pgtest.NewPool(t), ui.Opts{Logger: slog.New(slog.DiscardHandler)})
		require.NoError(t, err)
		h.Stop() // not started: nothing
		require.NoError(t, h.Start(t.Context()))
		require.NoError(t, h.Start(t.Context()))
		h.Stop()
		h.Stop()
	})
}

func TestCheckBind(t *testing.T) {
	t.Parallel()

	for _, tt := range []struct {
		addr, user, password string
		wantErr              string // empty: allowed
	}{
		{addr: "127.0.0.1:8080"},
		{addr: "127.1.2.3:8080"},
		{addr: "[::1]:8080"},
		{addr: "localhost:8080"},
		{addr: "LOCALHOST:0"},
		{addr: "[::ffff:127.0.0.1]:8080"},
		{addr: "0.0.0.0:8080", wantErr: "RIVERBUS_UI_USER"},
		{addr: ":8080", wantErr: "every interface"},
		{addr: "[::]:8080", wantErr: "RIVERBUS_UI_PASSWORD"},
		{addr: "10.0.0.5:8080", wantErr: "without authentication"},
		{addr: "example.com:8080", wantErr: "without authentication"},
		{addr: "0.0.0.0:8080", user: "ops", wantErr: "RIVERBUS_UI_PASSWORD"},
		{addr: "0.0.0.0:8080", password: "pw", wantErr: "RIVERBUS_UI_USER"},
		{addr: "0.0.0.0:8080", user: "ops", password: "pw"},
		{addr: ":8080", user: "ops", password: "pw"},
		{addr: "example.com:8080", user: "ops", password: "pw"},
		{addr: "127.0.0.1", wantErr: "must be host:port"},
		{addr: "", wantErr: "must be host:port"},
	} {
		err := ui.CheckBind(tt.addr, tt.user, tt.password)
		if tt.wantErr == "" {
			require.NoError(t, err, "CheckBind(%q, %q, %q)", tt.addr, tt.user, tt.password)
			continue
		}
		require.ErrorContains(t, err, tt.wantErr, "CheckBind(%q, %q, %q)", tt.addr, tt.user, tt.password)
		if !strings.Contains(tt.wantErr, "host:port") {
			require.ErrorIs(t, err, ui.ErrAuthRequired)
			require.ErrorContains(t, err, tt.addr)
		}
	}
}

func TestCheckMetricsBind(t *testing.T) {
	t.Parallel()
	require.NoError(t, ui.CheckMetricsBind("127.0.0.1:9090", "", ""))
	require.NoError(t, ui.CheckMetricsBind("0.0.0.0:9090", "prom", "pw"))
	err := ui.CheckMetricsBind("0.0.0.0:9090", "", "")
	require.ErrorIs(t, err, ui.ErrAuthRequired)
	require.ErrorContains(t, err, "RIVERBUS_METRICS_USER")
	require.ErrorContains(t, err, "metrics")
}

func TestServe(t *testing.T) {
	t.Parallel()

	t.Run("BindError", func(t *testing.T) {
		t.Parallel()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		defer ln.Close()
		addr := ln.Addr().String()
		err = ui.Serve(t.Context(), addr, http.NotFoundHandler(), ui.ServeOpts{Logger: slog.New(slog.DiscardHandler)})
		require.Error(t, err)
		require.Contains(t, err.Error(), addr)
	})

	t.Run("ShutsDownWhenContextEnds", func(t *testing.T) {
		t.Parallel()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(t.Context())
		errc := make(chan error, 1)
		go func() {
			errc <- ui.ServeListener(ctx, ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.WriteString(w, "ok")
			}), ui.ServeOpts{Logger: slog.New(slog.DiscardHandler)})
		}()
		resp, body := get(t, "http://"+ln.Addr().String()+"/", nil)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Equal(t, "ok", body)

		cancel()
		select {
		case err := <-errc:
			require.NoError(t, err)
		case <-time.After(15 * time.Second):
			t.Fatal("ServeListener did not return after the context ended")
		}
		// The listener is closed. (Dialing its port again is no proof: a
		// parallel test may have been handed the same port since.)
		_, err = ln.Accept()
		require.ErrorIs(t, err, net.ErrClosed, "still listening after shutdown")
	})
}
