package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// childCommands are the commands under internal/bench that scenarios run as
// child processes.
var childCommands = []string{"fanoutproc", "workerproc"}

// childBin returns the path of the child command name (one of
// childCommands). The first call builds them all into the temporary
// directory with one `go build`.
func (e *env) childBin(ctx context.Context, name string) (string, error) {
	if e.childDir != "" {
		return filepath.Join(e.childDir, name), nil
	}
	src, err := benchSourceDir()
	if err != nil {
		return "", err
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	out := filepath.Join(e.tmpDir, "bin")
	args := []string{"build", "-o", out + string(filepath.Separator)}
	for _, c := range childCommands {
		args = append(args, "./"+c)
	}
	e.log.Info("bench: building the child processes", "dir", src, "commands", childCommands)
	cmd := exec.CommandContext(ctx, goBin, args...)
	cmd.Dir = src
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %w: %s", err, strings.TrimSpace(string(b)))
	}
	e.childDir = out
	return filepath.Join(out, name), nil
}

// benchSourceDir finds the source of this package, where the child
// commands are: this file's directory when the binary was built from a
// checkout, else wherever `go list` finds it.
func benchSourceDir() (string, error) {
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		dir := filepath.Dir(file)
		if _, err := os.Stat(filepath.Join(dir, childCommands[0], "main.go")); err == nil {
			return dir, nil
		}
	}
	out, err := exec.Command("go", "list", "-f", "{{.Dir}}", "github.com/riverbus/riverbus/internal/bench").Output()
	if err != nil {
		var exitErr *exec.ExitError
		if errors.As(err, &exitErr) {
			return "", fmt.Errorf("source not found (run from a riverbus checkout): %s", strings.TrimSpace(string(exitErr.Stderr)))
		}
		return "", fmt.Errorf("source not found (run from a riverbus checkout): %w", err)
	}
	return strings.TrimSpace(string(out)), nil
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

// startChildren starts n children running bin with args against the
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
		return nil, fmt.Errorf("start %s: %w", filepath.Base(bin), err)
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

func (c *child) name() string { return filepath.Base(c.cmd.Path) }
