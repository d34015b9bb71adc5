package cli_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/internal/cli"
	"github.com/riverbus/riverbus/internal/pgtest"
)

// The status command that `riverbus run` prints works as printed, pasted
// into a shell with DATABASE_URL set: it names the binary by its path when
// PATH does not find it (./bin/riverbus after make run), and as plain
// riverbus when it does (after make install). This test binary stands in
// for the riverbus binary (TestMain). Not parallel: it sets PATH.
func TestRunBannerCommandsWorkAsPrinted(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	exe, err := os.Executable()
	require.NoError(t, err)

	// PATH finds no riverbus: the banner names this binary by its path.
	t.Setenv("PATH", t.TempDir())
	status := bannerStatusCommand(t, dbURL)
	require.Equal(t, exe+" status --watch", status)
	runPrinted(t, status, os.Getenv("PATH"), dbURL)

	// PATH finds this binary as riverbus (here through a link): the
	// banner says riverbus.
	bin := t.TempDir()
	require.NoError(t, os.Symlink(exe, filepath.Join(bin, "riverbus")))
	t.Setenv("PATH", bin)
	status = bannerStatusCommand(t, dbURL)
	require.Equal(t, "riverbus status --watch", status)
	runPrinted(t, status, bin, dbURL)

	// PATH finds another riverbus (an older install): the banner names
	// this binary by its path, not the one PATH finds.
	other := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(other, "riverbus"), []byte("#!/bin/sh\nexit 1\n"), 0o755))
	t.Setenv("PATH", other)
	require.Equal(t, exe+" status --watch", bannerStatusCommand(t, dbURL))
}

var bannerStatus = regexp.MustCompile(`(?m)^  status:\s+(.*?)\s{2,}\(with DATABASE_URL`)

// bannerStatusCommand runs `riverbus run` on dbURL until it has printed its
// banner, stops it, and returns the status command the banner shows.
func bannerStatusCommand(t *testing.T, dbURL string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut lockedBuffer
	done := make(chan int, 1)
	go func() {
		done <- cli.MainContext(ctx, []string{"--database-url", dbURL, "run", "--ui-addr", "127.0.0.1:0", "--metrics-addr", ""}, &out, &errOut)
	}()
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(out.String(), "Ctrl-C stops it.") {
		select {
		case code := <-done:
			t.Fatalf("riverbus run exited %d before its banner:\n%s\n%s", code, out.String(), errOut.String())
		case <-time.After(50 * time.Millisecond):
		}
		require.True(t, time.Now().Before(deadline), "no banner within 60s:\n%s\n%s", out.String(), errOut.String())
	}
	cancel()
	require.Equal(t, 0, <-done, "stderr: %s", errOut.String())
	m := bannerStatus.FindStringSubmatch(out.String())
	require.NotNil(t, m, "the banner has a status line:\n%s", out.String())
	return m[1]
}

// runPrinted runs command in a shell, as an operator pasting it would,
// with PATH path and DATABASE_URL dbURL, until it has printed a status
// report, then stops it.
func runPrinted(t *testing.T, command, path, dbURL string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", command)
	cmd.Env = []string{"PATH=" + path, "DATABASE_URL=" + dbURL, beRiverbus + "=1", "HOME=" + t.TempDir()}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var out lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	defer func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	}()
	for !strings.Contains(out.String(), "horizon ") {
		require.NoError(t, ctx.Err(), "%q printed no status within 60s:\n%s", command, out.String())
		time.Sleep(50 * time.Millisecond)
	}
	require.NotContains(t, out.String(), "not found", command)
}
