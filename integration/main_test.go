package integration_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus"
	"github.com/riverbus/riverbus/internal/pgtest"
	"github.com/riverbus/riverbus/internal/pools"
	"github.com/riverbus/riverbus/internal/testwait"
)

var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "riverbus-it-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	for _, pkg := range []string{"./cmd/riverbus", "./integration/testworker"} {
		cmd := exec.Command("go", "build", "-o", dir, pkg)
		cmd.Dir = ".."
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build %s: %v\n%s", pkg, err, out)
			os.RemoveAll(dir)
			os.Exit(1)
		}
	}
	code := pgtest.Run(m)
	os.RemoveAll(dir)
	os.Exit(code)
}

// proc is a child process of a test.
type proc struct {
	t    *testing.T
	name string // the binary and its arguments
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
	err  error
	// ready is what the child prints once it handles SIGTERM (readyOn);
	// stop waits for it.
	ready string
	// killed records that the test killed the child with SIGKILL.
	killed bool
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// start runs a built binary with DATABASE_URL set; it is killed when the
// test ends if still running.
func start(t *testing.T, dbURL, bin string, env []string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, bin), args...)
	cmd.Env = append(append(os.Environ(), "DATABASE_URL="+dbURL), env...)
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(t, cmd.Start())
	name := strings.Join(append([]string{bin}, args...), " ")
	p := &proc{t: t, name: name, cmd: cmd, out: out, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		running := p.kill9()
		if t.Failed() {
			t.Log(p.describe(running))
		}
	})
	return p
}

// readyOn tells stop what p prints once it handles SIGTERM, and returns p.
func (p *proc) readyOn(line string) *proc {
	p.ready = line
	return p
}

// kill9 kills p with SIGKILL unless it has exited, waits for it to end,
// and reports whether it was still running.
func (p *proc) kill9() bool {
	select {
	case <-p.done:
		return false
	default:
	}
	p.killed = true
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
	return true
}

// describe says how p ended and what it printed, for a failing test's log:
// "(no output)" rather than a blank, so a child that died before writing a
// line is told apart from a missing log.
func (p *proc) describe(runningAtEnd bool) string {
	how := fmt.Sprintf("exited: %v", p.err)
	switch {
	case p.err == nil:
		how = "exited cleanly"
	case runningAtEnd:
		how = "still running when the test ended (killed)"
	case p.killed:
		how = "killed by the test (SIGKILL)"
	}
	out := p.out.String()
	if strings.TrimSpace(out) == "" {
		out = "(no output)"
	}
	return fmt.Sprintf("%s (pid %d) %s; output:\n%s", p.name, p.cmd.Process.Pid, how, out)
}

// stop sends SIGTERM and waits for a clean exit. A child that gets SIGTERM
// before it installs its handler dies of it ("signal: terminated"), so
// stop first waits for the child's ready line when readyOn gave one: a
// test that may stop a child right after starting it must give one.
func (p *proc) stop() {
	p.t.Helper()
	if p.ready != "" {
		p.waitOutput(p.ready, readyTimeout)
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		require.NoError(p.t, p.err, "%s", p.describe(false))
	case <-time.After(60 * time.Second):
		p.kill9()
		p.t.Fatalf("did not stop within 60s after SIGTERM: %s", p.describe(true))
	}
}

// readyTimeout is how long a child may take to start: generous, since a
// machine busy with other work starts a Go binary and connects it slowly,
// and the tests assert what children do, not how fast they start.
const readyTimeout = 2 * time.Minute

func (p *proc) waitOutput(s string, timeout time.Duration) {
	p.t.Helper()
	testwait.Eventually(p.t, timeout, func() bool { return bytes.Contains([]byte(p.out.String()), []byte(s)) }, "%s prints %s", p.name, s)
}

// operator returns a riverbus.Client over db that is not started: the
// operator API (dead letters, checkpoints) as an application calls it.
func operator(t *testing.T, db *pgxpool.Pool) *riverbus.Client {
	t.Helper()
	c, err := riverbus.NewClient(db, &riverbus.Config{Logger: discardLogger()})
	require.NoError(t, err)
	return c
}

// jobCounts returns, per global sequence, the number of jobs of pool.
func jobCounts(t *testing.T, db *pgxpool.Pool, pool string) map[int64]int {
	t.Helper()
	var out map[int64]int
	// A server restart leaves dead connections in the pool: retry.
	require.NoError(t, retryFor(10*time.Second, func() error {
		rows, err := db.Query(context.Background(),
			`SELECT (args->>'global_sequence')::bigint, count(*) FROM river_job WHERE kind = $1 GROUP BY 1`, pool)
		if err != nil {
			return err
		}
		out = map[int64]int{}
		var seq int64
		var n int
		_, err = pgx.ForEachRow(rows, []any{&seq, &n}, func() error { out[seq] = n; return nil })
		return err
	}))
	return out
}

// createPool creates a pool (a name that local variables called pools do
// not shadow).
var createPool = pools.Create
