package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"time"
)

// executable returns the path of this program, which the backlog and
// scale-out scenarios run as their child processes with the hidden
// subcommand fanoutproc or workerproc first (see Main): the bench needs
// neither the source nor a Go toolchain, and works from an installed binary.
func executable() (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find this program's executable: %w", err)
	}
	return self, nil
}

// child is a child process that follows the start protocol of the
// scale-out scenario: it prints "ready" on stdout once set up, starts when a
// line arrives on stdin, stops on its own or when stdin closes, and prints
// its result as the last line of stdout.
type child struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string // stdout, closed at EOF
	stderr bytes.Buffer
	last   string
	done   bool
}

// readyTimeout bounds how long a child may take to get ready.
const readyTimeout = time.Minute

// startChildren starts n children running bin with args (the subcommand
// first) against the
// database at url, and waits until every one is ready. On error, the ones
// started are killed.
func startChildren(ctx context.Context, n int, bin, url string, args ...string) ([]*child, error) {
	var cs []*child
	for range n {
		c, err := startChild(ctx, bin, url, args...)
		if err != nil {
			killChildren(cs)
			return nil, err
		}
		cs = append(cs, c)
	}
	for i, c := range cs {
		if err := c.waitReady(ctx); err != nil {
			killChildren(cs)
			return nil, fmt.Errorf("child %d of %d: %w", i+1, n, err)
		}
	}
	return cs, nil
}

func startChild(ctx context.Context, bin, url string, args ...string) (*child, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+url)
	c := &child{cmd: cmd, lines: make(chan string, 16)}
	cmd.Stderr = &c.stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if c.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", c.name(), err)
	}
	go func() {
		defer close(c.lines)
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			c.lines <- s.Text()
		}
	}()
	return c, nil
}

func (c *child) waitReady(ctx context.Context) error {
	timer := time.NewTimer(readyTimeout)
	defer timer.Stop()
	select {
	case line, ok := <-c.lines:
		if ok && line == "ready" {
			return nil
		}
		if ok {
			return fmt.Errorf("%s printed %q instead of ready", c.name(), line)
		}
		return c.wait()
	case <-timer.C:
		return fmt.Errorf("%s not ready after %s", c.name(), readyTimeout)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// goChildren tells every child to start.
func goChildren(cs []*child) error {
	for _, c := range cs {
		if _, err := io.WriteString(c.stdin, "go\n"); err != nil {
			return fmt.Errorf("start %s: %w", c.name(), err)
		}
	}
	return nil
}

// finishChildren closes every child's stdin (telling those that do not stop
// on their own to stop), waits for all to exit, and returns the last line
// each printed.
func finishChildren(cs []*child) ([]string, error) {
	for _, c := range cs {
		_ = c.stdin.Close()
	}
	var firstErr error
	lasts := make([]string, len(cs))
	for i, c := range cs {
		if err := c.wait(); err != nil && firstErr == nil {
			firstErr = err
		}
		lasts[i] = c.last
	}
	return lasts, firstErr
}

// killChildren kills the children still running and waits for them.
func killChildren(cs []*child) {
	for _, c := range cs {
		if !c.done {
			_ = c.cmd.Process.Kill()
			_ = c.wait()
		}
	}
}

// wait reads the child's stdout to its end, then waits for it to exit.
func (c *child) wait() error {
	if c.done {
		return nil
	}
	for line := range c.lines {
		c.last = line
	}
	err := c.cmd.Wait()
	c.done = true
	if err != nil {
		return fmt.Errorf("%s: %w: %s", c.name(), err, lastLine(c.stderr.String()))
	}
	return nil
}

// name is the child's subcommand, fanoutproc or workerproc.
func (c *child) name() string { return c.cmd.Args[1] }
