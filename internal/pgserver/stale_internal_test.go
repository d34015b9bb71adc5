package pgserver

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A throwaway server's directory is removed as stale only when neither the
// process that made it nor its server runs: an initdb that a loaded machine
// keeps busy for minutes has no postmaster.pid yet, and another process's
// start must not delete it from under it (which made initdb fail with
// "could not open file global/…"). A directory whose owner died goes.
func TestRemoveStaleSparesDirectoriesWhoseOwnerRuns(t *testing.T) {
	old := time.Now().Add(-10 * time.Minute)
	makeDir := func(owner int) string {
		dir, err := os.MkdirTemp("", dirPrefix)
		require.NoError(t, err)
		t.Cleanup(func() { _ = os.RemoveAll(dir) })
		require.NoError(t, os.MkdirAll(filepath.Join(dir, "data", "global"), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(owner)), 0o644))
		require.NoError(t, os.Chtimes(dir, old, old))
		return dir
	}
	dead := exec.Command("true")
	require.NoError(t, dead.Run())

	initializing := makeDir(os.Getpid())
	abandoned := makeDir(dead.Process.Pid)
	removeStale()
	require.DirExists(t, initializing, "a directory whose owner runs was removed")
	require.NoDirExists(t, abandoned, "a directory whose owner died was kept")
}
