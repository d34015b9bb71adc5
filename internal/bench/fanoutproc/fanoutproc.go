// Package fanoutproc is the fan-out process of the backlog and scale-out
// benchmarks (internal/bench), run as the hidden subcommand fanoutproc of
// riverbus-bench, which the bench starts by re-executing its own binary: it
// runs the fan-out services with the default fanout.Config against
// DATABASE_URL until every pool's cursor reaches --target, whichever process
// moved it, then prints one JSON line with the catch-up time, its own peak
// RSS (VmHWM) and the jobs it inserted, and exits. It runs as a child process
// so that its memory is its own, and so that several of them share the pools
// as fan-out processes on several hosts would.
//
// It follows the start protocol of the bench's child processes (benchkit):
// it prints "ready" once connected and starts catching up when a line
// arrives on stdin, so that a parent can start several at once.
package fanoutproc

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/riverbus/riverbus/fanout"
	"github.com/riverbus/riverbus/internal/benchkit"
	"github.com/riverbus/riverbus/internal/pools"
)

// Name is the name of the hidden subcommand that runs this process.
const Name = "fanoutproc"

// Result is what fanoutproc prints.
type Result struct {
	ElapsedSeconds float64 `json:"elapsed_seconds"`
	PeakRSSBytes   int64   `json:"peak_rss_bytes"`
	Jobs           int64   `json:"jobs"`
	// DoneSeconds is the time from the start to the last batch of this
	// process that brought a pool's cursor to the target: with several
	// processes, the latest of theirs is when the last pool caught up,
	// which the others learn only by polling. 0: none of its batches did.
	DoneSeconds float64 `json:"done_seconds"`
}

// Command returns the hidden subcommand Name, which runs this process.
func Command() *cobra.Command {
	var (
		target  int64
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:    Name,
		Short:  "The fan-out process of the backlog and scale-out benchmarks (started by the bench)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return run(target, timeout, cmd.InOrStdin(), cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.Int64Var(&target, "target", 0, "stop when every pool's cursor is at least this sequence")
	f.DurationVar(&timeout, "timeout", 15*time.Minute, "give up after this long")
	return cmd
}

func run(target int64, timeout time.Duration, stdin io.Reader, stdout io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	db, err := benchkit.ChildPool(ctx, 10) // as `riverbus fanout`
	if err != nil {
		return err
	}
	defer db.Close()

	all, err := pools.List(ctx, db)
	if err != nil {
		return err
	}
	if len(all) == 0 {
		return errors.New("no pools")
	}
	var (
		mu      sync.Mutex
		pending = map[string]bool{}
		done    = make(chan struct{})
	)
	for _, p := range all {
		if p.Cursor < target {
			pending[p.Name] = true
		}
	}
	reached := func(pool string, cursor int64) {
		mu.Lock()
		defer mu.Unlock()
		if cursor >= target && pending[pool] {
			delete(pending, pool)
			if len(pending) == 0 {
				close(done)
			}
		}
	}
	if len(pending) == 0 {
		close(done)
	}

	var (
		start       time.Time
		doneSeconds float64 // guarded by mu
	)
	onBatch := func(b fanout.BatchResult) {
		if b.Cursor >= target {
			mu.Lock()
			doneSeconds = max(doneSeconds, time.Since(start).Seconds())
			mu.Unlock()
		}
		reached(b.Pool, b.Cursor)
	}
	f, err := fanout.New(db, &fanout.Config{Logger: benchkit.ChildLogger(os.Stderr), OnBatch: onBatch})
	if err != nil {
		return err
	}
	if err := benchkit.AwaitGo(bufio.NewReader(stdin), stdout); err != nil {
		return err
	}
	start = time.Now()
	runCtx, stop := context.WithCancel(ctx)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		_ = f.Run(runCtx)
	}()
	// OnBatch sees every batch that inserts jobs; the poll is a safety net
	// for a last batch that moved a cursor without inserting any.
	ticker := time.NewTicker(250 * time.Millisecond)
	defer ticker.Stop()
wait:
	for {
		select {
		case <-done:
			break wait
		case <-ticker.C:
			ps, err := pools.List(ctx, db)
			if err == nil {
				for _, p := range ps {
					reached(p.Name, p.Cursor)
				}
			}
		case <-ctx.Done():
			stop()
			<-stopped
			return fmt.Errorf("pools did not reach sequence %d within %s", target, timeout)
		}
	}
	elapsed := time.Since(start)
	stop()
	<-stopped

	var jobs int64
	for _, n := range f.Stats().EventsFannedOut {
		jobs += n
	}
	hwm, err := peakRSS()
	if err != nil {
		return err
	}
	mu.Lock()
	defer mu.Unlock()
	return json.NewEncoder(stdout).Encode(Result{ElapsedSeconds: elapsed.Seconds(), PeakRSSBytes: hwm, Jobs: jobs, DoneSeconds: doneSeconds})
}

// peakRSS reads this process's peak resident set size (VmHWM).
func peakRSS() (int64, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), "VmHWM:"); ok {
			fields := strings.Fields(rest) // "12345 kB"
			if len(fields) == 2 && fields[1] == "kB" {
				kb, err := strconv.ParseInt(fields[0], 10, 64)
				return kb * 1024, err
			}
		}
	}
	return 0, errors.New("VmHWM not found in /proc/self/status")
}
