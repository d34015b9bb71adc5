package pgtest

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/internal/testwait"
)

// envHelper makes TestHelperAttach act: it runs only in the processes
// TestSharedServer starts.
const envHelper = "RIVERBUS_PGTEST_HELPER"

// Two test binaries of one module share one server; it stays while one of
// them lives and stops once both are killed with SIGKILL, which gives them
// no chance to clean up.
func TestSharedServer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server and test processes")
	}
	module := t.TempDir() // a module of its own: a server of its own
	require.NoError(t, os.WriteFile(filepath.Join(module, "go.mod"), []byte("module example.com/shared\n"), 0o600))
	t.Cleanup(func() { _ = os.RemoveAll(sharedDirOf(module)) }) // the locks the binaries left

	a, urlA := startAttached(t, module)
	b, urlB := startAttached(t, module)
	require.Equal(t, urlA, urlB, "one server for both")
	require.True(t, reachable(context.Background(), urlA))

	require.NoError(t, a.Process.Signal(syscall.SIGKILL))
	_ = a.Wait()
	// The supervisor looks every 200ms: give it several looks.
	testwait.Never(t, time.Second, func() bool { return !reachable(context.Background(), urlA) }, "the server stopped while a binary still used it")

	require.NoError(t, b.Process.Signal(syscall.SIGKILL))
	_ = b.Wait()
	testwait.Eventually(t, time.Minute, func() bool { return !reachable(context.Background(), urlA) }, "the server stops once no binary uses it")
}

// startAttached starts this test binary as TestHelperAttach in the module
// directory dir, waits until it has attached to the shared server, and
// returns it and the server's URL. It is killed when the test ends.
func startAttached(t *testing.T, dir string) (*exec.Cmd, string) {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(exe, "-test.run=^TestHelperAttach$", "-test.v")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), envHelper+"=1")
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	out := &testwait.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		stdin.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line := regexp.MustCompile(`(?m)^(url|error): (.*)$`)
	// Starting the server runs initdb: generous on a busy machine.
	testwait.Eventually(t, 2*time.Minute, func() bool { return line.MatchString(out.String()) }, "the helper attaches (output so far: %q)", out)
	m := line.FindStringSubmatch(out.String())
	require.Equal(t, "url", m[1], m[2])
	return cmd, m[2]
}

// TestHelperAttach is a process of TestSharedServer's, not a test: it
// attaches to the shared server, prints its URL and waits until its stdin
// closes or it is killed.
func TestHelperAttach(t *testing.T) {
	if os.Getenv(envHelper) != "1" {
		t.Skip("a helper process of TestSharedServer")
	}
	url, err := attachShared(context.Background())
	if err != nil {
		fmt.Printf("error: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("url: %s\n", url)
	_, _ = io.Copy(io.Discard, os.Stdin)
	os.Exit(0)
}
