package benchkit

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// A bench's child processes are its own program re-executed with a hidden
// subcommand first (the bench needs neither the source nor a Go toolchain,
// and works from an installed binary), against one database, named by
// DATABASE_URL. They follow a start protocol: a child prints "ready" on
// stdout once set up (AwaitGo), starts when a line arrives on stdin
// (GoChildren), stops on its own or when stdin closes (FinishChildren), and
// prints its result as the last line of stdout.

// Executable returns the path of this program, which a bench runs as its
// child processes.
func Executable() (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find this program's executable: %w", err)
	}
	return self, nil
}

// Child is a child process started by the bench.
type Child struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr bytes.Buffer
	onLine func(line string)
	ready  chan error    // once: nil when it printed "ready"
	exited chan struct{} // closed once it exited, err and last set
	err    error         // why it failed; nil when it exited cleanly
	last   string        // its last line of stdout
}

// ChildReadyTimeout bounds how long a child may take to get ready.
const ChildReadyTimeout = time.Minute

// StartChildren starts n children running bin with args (the subcommand
// first) against the database at url, and waits until every one is ready.
// onLine, when not nil, gets each line child i prints after "ready", as it
// comes. On error, the ones started are killed.
func StartChildren(ctx context.Context, n int, bin, url string, args []string, onLine func(i int, line string)) ([]*Child, error) {
	var cs []*Child
	for i := range n {
		var f func(string)
		if onLine != nil {
			f = func(line string) { onLine(i, line) }
		}
		c, err := startChild(ctx, bin, url, args, f)
		if err != nil {
			KillChildren(cs)
			return nil, err
		}
		cs = append(cs, c)
	}
	for i, c := range cs {
		if err := c.waitReady(ctx); err != nil {
			KillChildren(cs)
			return nil, fmt.Errorf("child %d of %d: %w", i+1, n, err)
		}
	}
	return cs, nil
}

func startChild(ctx context.Context, bin, url string, args []string, onLine func(string)) (*Child, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+url)
	c := &Child{cmd: cmd, onLine: onLine, ready: make(chan error, 1), exited: make(chan struct{})}
	cmd.Stderr = &c.stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if c.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", c.Name(), err)
	}
	go c.read(stdout)
	return c, nil
}

// read follows the child's stdout to its end, then waits for it to exit,
// sets c.err and c.last, and closes c.exited.
func (c *Child) read(stdout io.Reader) {
	defer close(c.exited)
	s := bufio.NewScanner(stdout)
	readySent := false
	for s.Scan() {
		line := s.Text()
		switch {
		case !readySent:
			readySent = true
			if line != "ready" {
				c.ready <- fmt.Errorf("%s printed %q instead of ready", c.Name(), line)
			} else {
				c.ready <- nil
			}
		case c.onLine != nil:
			c.onLine(line)
		}
		c.last = line
	}
	if err := c.cmd.Wait(); err != nil {
		c.err = fmt.Errorf("%s: %w: %s", c.Name(), err, LastLine(c.stderr.String()))
	}
	if !readySent {
		err := c.err
		if err == nil {
			err = fmt.Errorf("%s exited before it was ready", c.Name())
		}
		c.ready <- err
	}
}

func (c *Child) waitReady(ctx context.Context) error {
	timer := time.NewTimer(ChildReadyTimeout)
	defer timer.Stop()
	select {
	case err := <-c.ready:
		return err
	case <-timer.C:
		return fmt.Errorf("%s not ready after %s", c.Name(), ChildReadyTimeout)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Name is the child's subcommand.
func (c *Child) Name() string { return c.cmd.Args[1] }

// Exited is closed once the child has exited; Err then says why it
// failed.
func (c *Child) Exited() <-chan struct{} { return c.exited }

// Err is why the child failed, nil when it exited cleanly; valid once
// Exited is closed.
func (c *Child) Err() error { return c.err }

// GoChildren tells every child to start.
func GoChildren(cs []*Child) error {
	for _, c := range cs {
		if _, err := io.WriteString(c.stdin, "go\n"); err != nil {
			return fmt.Errorf("start %s: %w", c.Name(), err)
		}
	}
	return nil
}

// FinishChildren closes every child's stdin (telling those that do not
// stop on their own to stop), waits for all to exit, and returns the last
// line each printed: its result.
func FinishChildren(cs []*Child) ([]string, error) {
	for _, c := range cs {
		_ = c.stdin.Close()
	}
	var firstErr error
	lasts := make([]string, len(cs))
	for i, c := range cs {
		<-c.exited
		if c.err != nil && firstErr == nil {
			firstErr = c.err
		}
		lasts[i] = c.last
	}
	return lasts, firstErr
}

// KillChildren kills the children still running and waits for them.
func KillChildren(cs []*Child) {
	for _, c := range cs {
		select {
		case <-c.exited:
		default:
			_ = c.cmd.Process.Kill()
			<-c.exited
		}
	}
}

// LastLine returns the last line of s, without surrounding white space.
func LastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// The child's side of the protocol.

// ChildPool connects a child process to its database (DATABASE_URL) with
// at most maxConns connections.
func ChildPool(ctx context.Context, maxConns int32) (*pgxpool.Pool, error) {
	url := os.Getenv("DATABASE_URL")
	if url == "" {
		return nil, errors.New("DATABASE_URL is not set")
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	cfg.MaxConns = maxConns
	db, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := db.Ping(ctx); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// AwaitGo prints "ready" and waits for the start line on stdin.
func AwaitGo(stdin *bufio.Reader, stdout io.Writer) error {
	fmt.Fprintln(stdout, "ready")
	if _, err := stdin.ReadString('\n'); err != nil {
		return fmt.Errorf("waiting for the start line on stdin: %w", err)
	}
	return nil
}

// StdinClosed returns a channel closed once stdin, read to its end,
// closes: the bench's signal to stop.
func StdinClosed(stdin io.Reader) <-chan struct{} {
	closed := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, stdin)
		close(closed)
	}()
	return closed
}

// ChildLogger logs a child's warnings and errors to stderr, whose last
// line the bench quotes when the child fails.
func ChildLogger(stderr io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}
