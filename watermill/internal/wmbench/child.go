package wmbench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
)

// SubscriberCommand is the hidden subcommand that runs a subscriber process
// of the publish-consume and catch-up scenarios: the bench re-executes its
// own binary with it first.
//
// The process connects to DATABASE_URL, makes its subscriber and prints
// "ready"; when a line arrives on stdin it subscribes to the topic and acks
// every message, printing "acked N" lines as its count grows; when stdin
// closes it closes the subscriber and prints its result (childResult) as
// one JSON line, the last.
const SubscriberCommand = "subscriber"

// childResult is what a subscriber process prints last.
type childResult struct {
	Acked int64 `json:"acked"`
	// Duplicates is how many of its messages it had acked already (by
	// UUID) within this process.
	Duplicates int64 `json:"duplicates"`
	// StartedUnixNano is when it called Subscribe; LastAckUnixNano when it
	// acked its last message (0: none).
	StartedUnixNano int64 `json:"started_unix_nano"`
	LastAckUnixNano int64 `json:"last_ack_unix_nano"`
}

// childConns is the pool size of a subscriber process: a riverbus
// subscription holds a few connections (River's producer, completer and
// listener), its fan-out a few more; watermill-sql's holds one.
const childConns = 20

func subscriberCommand() *cobra.Command {
	var (
		side      string
		group     string
		runFanout bool
		timeout   time.Duration
	)
	cmd := &cobra.Command{
		Use:    SubscriberCommand,
		Short:  "A subscriber process of the publish-consume and catch-up scenarios (started by the bench)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := parseImpl(side)
			if err != nil {
				return &usageError{err}
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			return runSubscriber(ctx, s, subscriberOpts{group: group, runFanout: runFanout, logger: quietLogger(cmd.ErrOrStderr())}, cmd.InOrStdin(), cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringVar(&side, "impl", "", "riverbus or watermill-sql")
	f.StringVar(&group, "group", "", "the consumer group")
	f.BoolVar(&runFanout, "run-fanout", false, "riverbus: the subscriber runs the fan-out (SubscriberConfig.RunFanout)")
	f.DurationVar(&timeout, "timeout", 30*time.Minute, "give up after this long")
	return cmd
}

func quietLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

func runSubscriber(ctx context.Context, side impl, o subscriberOpts, stdin io.Reader, stdout io.Writer) error {
	url := os.Getenv("DATABASE_URL")
	if url == "" {
		return errors.New("DATABASE_URL is not set")
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return fmt.Errorf("DATABASE_URL: %w", err)
	}
	cfg.MaxConns = childConns
	db, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := db.Ping(ctx); err != nil {
		return err
	}
	sub, err := newSubscriber(side, db, o)
	if err != nil {
		return err
	}
	defer sub.Close()

	var out sync.Mutex // stdout's lines
	say := func(s string) {
		out.Lock()
		defer out.Unlock()
		fmt.Fprintln(stdout, s)
	}
	say("ready")
	lines := bufio.NewScanner(stdin)
	if !lines.Scan() {
		return errors.New("stdin closed before the start")
	}
	stopped := make(chan struct{})
	go func() {
		for lines.Scan() {
		}
		close(stopped)
	}()

	var (
		mu  sync.Mutex
		res = childResult{StartedUnixNano: time.Now().UnixNano()}
	)
	msgs, err := sub.Subscribe(ctx, topic)
	if err != nil {
		return err
	}
	consumed := make(chan struct{})
	go func() {
		defer close(consumed)
		seen := make(map[string]struct{})
		for msg := range msgs {
			msg.Ack()
			now := time.Now().UnixNano()
			_, dup := seen[msg.UUID]
			seen[msg.UUID] = struct{}{}
			mu.Lock()
			res.Acked++
			res.LastAckUnixNano = now
			if dup {
				res.Duplicates++
			}
			mu.Unlock()
		}
	}()

	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var reported int64
	report := func() {
		mu.Lock()
		n := res.Acked
		mu.Unlock()
		if n != reported {
			reported = n
			say("acked " + strconv.FormatInt(n, 10))
		}
	}
loop:
	for {
		select {
		case <-tick.C:
			report()
		case <-stopped:
			break loop
		case <-ctx.Done():
			return fmt.Errorf("no stop before the timeout: %w", ctx.Err())
		}
	}
	if err := sub.Close(); err != nil {
		return fmt.Errorf("close the subscriber: %w", err)
	}
	<-consumed
	mu.Lock()
	b, err := json.Marshal(res)
	mu.Unlock()
	if err != nil {
		return err
	}
	say(string(b))
	return nil
}

// child is a subscriber process started by the bench.
type child struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr bytes.Buffer
	ready  chan error    // once: nil when it printed "ready"
	acked  func(n int64) // each "acked N" line
	exited chan struct{} // closed once it exited and err and result are set
	err    error         // why it failed, nil when it exited cleanly with its result
	result childResult
}

// childReadyTimeout bounds how long a child may take to get ready.
const childReadyTimeout = time.Minute

// consumeWithChildren runs procs subscriber processes of group against the
// database at url until together they have acked want messages, and
// returns the time from the first Subscribe call to the last ack, and the
// duplicates they saw.
func consumeWithChildren(ctx context.Context, side impl, url, group string, procs, want int, runFanout bool) (time.Duration, int64, error) {
	bin, err := os.Executable()
	if err != nil {
		return 0, 0, fmt.Errorf("find this program's executable: %w", err)
	}
	var (
		mu     sync.Mutex
		counts = make([]int64, procs)
		enough = make(chan struct{})
		closed bool
	)
	var cs []*child
	defer func() {
		for _, c := range cs {
			select {
			case <-c.exited:
			default:
				_ = c.cmd.Process.Kill()
				<-c.exited
			}
		}
	}()
	for i := range procs {
		args := []string{SubscriberCommand, "--impl", string(side), "--group", group}
		if runFanout {
			args = append(args, "--run-fanout")
		}
		c, err := startChild(ctx, bin, url, args, func(n int64) {
			mu.Lock()
			defer mu.Unlock()
			counts[i] = n
			if sum(counts) >= int64(want) && !closed {
				closed = true
				close(enough)
			}
		})
		if err != nil {
			return 0, 0, err
		}
		cs = append(cs, c)
	}
	for i, c := range cs {
		select {
		case err := <-c.ready:
			if err != nil {
				return 0, 0, fmt.Errorf("subscriber process %d of %d: %w", i+1, procs, err)
			}
		case <-time.After(childReadyTimeout):
			return 0, 0, fmt.Errorf("subscriber process %d of %d: not ready after %s", i+1, procs, childReadyTimeout)
		case <-ctx.Done():
			return 0, 0, ctx.Err()
		}
	}
	for _, c := range cs {
		if _, err := io.WriteString(c.stdin, "go\n"); err != nil {
			return 0, 0, fmt.Errorf("start a subscriber process: %w", err)
		}
	}
	// A process that exits meanwhile ends the wait with its error.
	died := make(chan *child, procs)
	for _, c := range cs {
		go func() {
			select {
			case <-c.exited:
				died <- c
			case <-enough:
			}
		}()
	}
	select {
	case <-enough:
	case c := <-died:
		if c.err == nil {
			return 0, 0, errors.New("a subscriber process exited before it was told to")
		}
		return 0, 0, c.err
	case <-ctx.Done():
		mu.Lock()
		defer mu.Unlock()
		return 0, 0, fmt.Errorf("%d of %d messages acked: %w", sum(counts), want, ctx.Err())
	}
	for _, c := range cs {
		_ = c.stdin.Close()
	}
	var first, last, dups int64
	for _, c := range cs {
		<-c.exited
		if c.err != nil {
			return 0, 0, c.err
		}
		r := c.result
		if first == 0 || r.StartedUnixNano < first {
			first = r.StartedUnixNano
		}
		last = max(last, r.LastAckUnixNano)
		dups += r.Duplicates
	}
	return time.Duration(last - first), dups, nil
}

func sum(xs []int64) int64 {
	var s int64
	for _, x := range xs {
		s += x
	}
	return s
}

func startChild(ctx context.Context, bin, url string, args []string, acked func(int64)) (*child, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+url)
	c := &child{cmd: cmd, ready: make(chan error, 1), acked: acked, exited: make(chan struct{})}
	cmd.Stderr = &c.stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if c.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start a subscriber process: %w", err)
	}
	go c.read(stdout)
	return c, nil
}

// read follows the child's stdout to its end, then waits for it to exit,
// sets c.err and c.result, and closes c.exited.
func (c *child) read(stdout io.Reader) {
	defer close(c.exited)
	s := bufio.NewScanner(stdout)
	readySent := false
	var last string
	for s.Scan() {
		line := s.Text()
		switch {
		case !readySent:
			readySent = true
			if line != "ready" {
				c.ready <- fmt.Errorf("printed %q instead of ready", line)
			} else {
				c.ready <- nil
			}
		case strings.HasPrefix(line, "acked "):
			if n, err := strconv.ParseInt(strings.TrimPrefix(line, "acked "), 10, 64); err == nil {
				c.acked(n)
			}
		}
		last = line
	}
	if err := c.cmd.Wait(); err != nil {
		c.err = fmt.Errorf("subscriber process: %w: %s", err, lastLine(c.stderr.String()))
	} else if err := json.Unmarshal([]byte(last), &c.result); err != nil {
		c.err = fmt.Errorf("subscriber process: its last line %q is no result: %w", last, err)
	}
	if !readySent {
		c.ready <- fmt.Errorf("exited before it was ready: %v", c.err)
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
