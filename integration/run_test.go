package integration_test

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/riverbus/riverbus/internal/testwait"
	"github.com/stretchr/testify/require"
)

// What `make run` does, as a process: riverbus run --demo with no
// DATABASE_URL starts its own PostgreSQL, events reach the demo workers,
// River UI and metrics answer, and SIGINT ends it with exit 0 within 15 s,
// leaving no server process and no data directory behind.
func TestRunDemoProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("starts its own PostgreSQL")
	}
	t.Parallel()
	p := start(t, "", "riverbus", []string{"RIVERBUS_UI_ADDR=127.0.0.1:0", "RIVERBUS_METRICS_ADDR=127.0.0.1:0", "RIVERBUS_LOG_LEVEL=warn"},
		"run", "--demo", "--demo-rate", "50")
	p.waitOutput("Ctrl-C stops it.", 3*time.Minute) // initdb, a server start and migrations, on a loaded machine
	out := p.out.String()
	uiURL := regexp.MustCompile(`River UI:\s+(\S+)`).FindStringSubmatch(out)
	metricsURL := regexp.MustCompile(`metrics:\s+(\S+)`).FindStringSubmatch(out)
	require.NotNil(t, uiURL, out)
	require.NotNil(t, metricsURL, out)
	dataDir := regexp.MustCompile(`data in (\S+)\)`).FindStringSubmatch(out)
	require.NotNil(t, dataDir, out)

	// Events reach workers: the summary line shows completed jobs.
	done := regexp.MustCompile(`audit lag \d+ done (\d+)`)
	testwait.Eventually(t, 60*time.Second, func() bool {
		for _, m := range done.FindAllStringSubmatch(p.out.String(), -1) {
			if n, _ := strconv.Atoi(m[1]); n > 0 {
				return true
			}
		}
		return false
	}, "demo jobs completed")

	// billing's poison invoice (one in the first 10 s at this rate) ends
	// as a dead letter and its checkpoint moves on. Its five attempts take
	// seconds on a quiet machine, but each retry waits for River's leader
	// to promote it, and on a machine loaded past its cores they took over
	// a minute once: the bound is a hang guard.
	dead := regexp.MustCompile(`billing lag \d+ done \d+ dead [1-9]`)
	testwait.Eventually(t, 3*time.Minute, func() bool {
		return dead.MatchString(p.out.String())
	}, "billing's poison invoice reaches the dead letters")

	get := func(url string) (int, string) {
		resp, err := http.Get(url)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	code, body := get(uiURL[1])
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, strings.ToLower(body), "<html")
	code, body = get(strings.TrimSuffix(uiURL[1], "/") + "/api/jobs?state=completed&limit=5")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `"kind"`)
	// A scrape reads riverbus's state under a 5 s bound and, when the
	// database is slower than that (a loaded CI machine), answers
	// riverbus_up 0 without the pools' figures: the next one reads again.
	testwait.Eventually(t, time.Minute, func() bool {
		code, body = get(metricsURL[1])
		require.Equal(t, http.StatusOK, code)
		return strings.Contains(body, `riverbus_pool_cursor{pool="audit"}`)
	}, "metrics show the audit pool's cursor")

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGINT))
	select {
	case <-p.done:
	// A hang guard: the shutdown stops River and a PostgreSQL server, which
	// a saturated machine may take well over a quiet one's second to do.
	case <-time.After(time.Minute):
		t.Fatalf("riverbus run did not exit within a minute of SIGINT:\n%s", p.out.String())
	}
	require.NoError(t, p.err, p.out.String())
	require.Contains(t, p.out.String(), "throwaway PostgreSQL stopped and removed")
	_, err := os.Stat(filepath.Dir(dataDir[1]))
	require.True(t, os.IsNotExist(err), "data directory %s left behind", dataDir[1])
	// No postgres process of ours is left: its data directory is gone, and
	// no process names it.
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range procs {
		b, err := os.ReadFile(f)
		if err == nil && strings.Contains(string(b), dataDir[1]) {
			t.Fatalf("a process still runs on the removed data directory: %s", strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
}
