package wmbench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/riverbus/riverbus/internal/benchkit"
)

// SubscriberCommand is the hidden subcommand that runs a subscriber process
// of the publish-consume and catch-up scenarios: the bench re-executes its
// own binary with it first.
//
// The process connects to DATABASE_URL, makes its subscriber and follows
// the start protocol of the bench's child processes (benchkit): it prints
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
				return benchkit.Usage(err)
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			return runSubscriber(ctx, s, subscriberOpts{group: group, runFanout: runFanout, logger: benchkit.ChildLogger(cmd.ErrOrStderr())}, cmd.InOrStdin(), cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringVar(&side, "impl", "", "riverbus or watermill-sql")
	f.StringVar(&group, "group", "", "the consumer group")
	f.BoolVar(&runFanout, "run-fanout", false, "riverbus: the subscriber runs the fan-out (SubscriberConfig.RunFanout)")
	f.DurationVar(&timeout, "timeout", 30*time.Minute, "give up after this long")
	return cmd
}

func runSubscriber(ctx context.Context, side impl, o subscriberOpts, stdin io.Reader, stdout io.Writer) error {
	db, err := benchkit.ChildPool(ctx, childConns)
	if err != nil {
		return err
	}
	defer db.Close()
	sub, err := newSubscriber(side, db, o)
	if err != nil {
		return err
	}
	defer sub.Close()

	lines := bufio.NewReader(stdin)
	if err := benchkit.AwaitGo(lines, stdout); err != nil {
		return err
	}
	stopped := benchkit.StdinClosed(lines)

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
			fmt.Fprintf(stdout, "%s%d\n", ackedPrefix, n)
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
	fmt.Fprintln(stdout, string(b))
	return nil
}

// ackedPrefix starts the lines a subscriber process prints as its count of
// acked messages grows.
const ackedPrefix = "acked "

// consumeWithChildren runs procs subscriber processes of group against the
// database at url until together they have acked want messages, and
// returns the time from the first Subscribe call to the last ack, and the
// duplicates they saw.
func consumeWithChildren(ctx context.Context, side impl, url, group string, procs, want int, runFanout bool) (time.Duration, int64, error) {
	bin, err := benchkit.Executable()
	if err != nil {
		return 0, 0, err
	}
	var (
		mu     sync.Mutex
		counts = make([]int64, procs)
		enough = make(chan struct{})
		closed bool
	)
	args := []string{SubscriberCommand, "--impl", string(side), "--group", group}
	if runFanout {
		args = append(args, "--run-fanout")
	}
	cs, err := benchkit.StartChildren(ctx, procs, bin, url, args, func(i int, line string) {
		acked, ok := strings.CutPrefix(line, ackedPrefix)
		n, err := strconv.ParseInt(acked, 10, 64)
		if !ok || err != nil {
			return
		}
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
	defer benchkit.KillChildren(cs)
	if err := benchkit.GoChildren(cs); err != nil {
		return 0, 0, err
	}
	// A process that exits meanwhile ends the wait with its error.
	died := make(chan *benchkit.Child, procs)
	for _, c := range cs {
		go func() {
			select {
			case <-c.Exited():
				died <- c
			case <-enough:
			}
		}()
	}
	select {
	case <-enough:
	case c := <-died:
		if c.Err() == nil {
			return 0, 0, errors.New("a subscriber process exited before it was told to")
		}
		return 0, 0, c.Err()
	case <-ctx.Done():
		mu.Lock()
		defer mu.Unlock()
		return 0, 0, fmt.Errorf("%d of %d messages acked: %w", sum(counts), want, ctx.Err())
	}
	lines, err := benchkit.FinishChildren(cs)
	if err != nil {
		return 0, 0, err
	}
	var first, last, dups int64
	for _, line := range lines {
		var r childResult
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			return 0, 0, fmt.Errorf("subscriber process: its last line %q is no result: %w", line, err)
		}
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
