package cli_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/internal/cli"
	"github.com/riverbus/riverbus/internal/pgtest"
)

// `fanout --process-metrics-addr` serves the process's own metrics: the
// fan-out round histogram with the rounds it ran, Go's runtime, and none
// of the database-wide figures (riverbus_up and the pools' gauges are run's
// and ui's to serve: many fan-out processes must not each repeat them).
func TestFanoutServesProcessMetrics(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewDatabase(t)
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	var errOut lockedBuffer
	done := make(chan int, 1)
	go func() {
		done <- cli.MainContext(ctx, []string{"--database-url", dbURL, "fanout", "--poll-interval", "50ms", "--process-metrics-addr", addr}, io.Discard, &errOut)
	}()
	defer func() {
		cancel()
		require.Equal(t, 0, <-done, "stderr: %s", errOut.String())
	}()

	var body string
	require.Eventually(t, func() bool {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			return false
		}
		body = string(b)
		return metricValue(body, "riverbus_fanout_round_seconds_count") > 0
	}, 30*time.Second, 50*time.Millisecond, "no round observed on %s; stderr: %s", addr, errOut.String())
	require.Contains(t, body, "go_goroutines")
	require.NotContains(t, body, "riverbus_up")
	require.NotContains(t, body, "riverbus_pool_")
	require.Contains(t, errOut.String(), "http://"+addr+"/metrics", "the log says where the metrics are")
}

// The process metrics obey the metrics endpoint's rules: no address
// outside loopback without a password, and a busy port names the setting.
func TestProcessMetricsAddrRefusals(t *testing.T) {
	t.Parallel()
	r := run(t, "postgres://nobody@127.0.0.1:1/nowhere", "fanout", "--process-metrics-addr", "0.0.0.0:0")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "refusing to serve process metrics on 0.0.0.0:0 (host 0.0.0.0) without authentication")

	r = run(t, "", "work", "--pool", "billing", "--webhook", "http://127.0.0.1:1/hook", "--process-metrics-addr", "no-port")
	require.Equal(t, 2, r.code, "a setting that is not valid is a usage error")
	require.Contains(t, r.stderr, "RIVERBUS_PROCESS_METRICS_ADDR (--process-metrics-addr) must be host:port")

	busy, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer busy.Close()
	r = run(t, "postgres://nobody@127.0.0.1:1/nowhere", "fanout", "--process-metrics-addr", busy.Addr().String())
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "process metrics: listen on "+busy.Addr().String()+" (RIVERBUS_PROCESS_METRICS_ADDR or --process-metrics-addr)")
}

// freeAddr returns a loopback address with a port nothing listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// metricValue returns the value of an unlabelled sample in an exposition,
// or -1.
func metricValue(exposition, name string) float64 {
	for _, line := range strings.Split(exposition, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err == nil {
				return f
			}
		}
	}
	return -1
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
