// Package workerproc is a worker process of the scale-out benchmark
// (internal/bench), run as the hidden subcommand workerproc of
// riverbus-bench, which the bench starts by re-executing its own binary: a
// River client with riverbus's worker settings (workers.RiverConfig, as a
// riverbus.Client with workers uses) and a no-op worker for one pool's jobs,
// against DATABASE_URL. It prints "ready" once the client is built and
// connected, starts the client when a line arrives on stdin, works jobs until
// stdin closes, stops the client, and prints one JSON line with the jobs it
// completed and when it completed its last one. Several run at once as worker
// processes on several hosts would, sharing the pool's queue.
package workerproc

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/spf13/cobra"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/internal/benchkit"
	"github.com/riverbus/riverbus/workers"
)

// Name is the name of the hidden subcommand that runs this process.
const Name = "workerproc"

// Result is what workerproc prints.
type Result struct {
	// Jobs is how many jobs this process completed.
	Jobs int64 `json:"jobs"`
	// DoneSeconds is the time from the start to this process's last
	// completed job (River reports a completion once it is stored).
	DoneSeconds float64 `json:"done_seconds"`
}

// pool is the pool whose jobs this process works (-pool); its name is the
// jobs' kind.
var pool = "bench"

type args struct{ workers.Args }

func (args) Kind() string { return pool }

// Command returns the hidden subcommand Name, which runs this process.
func Command() *cobra.Command {
	var (
		maxWorkers, conns int
		timeout           time.Duration
	)
	cmd := &cobra.Command{
		Use:    Name,
		Short:  "A worker process of the scale-out benchmark (started by the bench)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return run(maxWorkers, int32(conns), timeout, cmd.InOrStdin(), cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringVar(&pool, "pool", pool, "the pool whose jobs to work (job kind; its default queue)")
	f.IntVar(&maxWorkers, "max-workers", 100, "River's MaxWorkers for the pool's queue")
	f.IntVar(&conns, "conns", 10, "connection pool size (as `riverbus work`)")
	f.DurationVar(&timeout, "timeout", 15*time.Minute, "give up after this long")
	return cmd
}

func run(maxWorkers int, conns int32, timeout time.Duration, stdin io.Reader, stdout io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	db, err := benchkit.ChildPool(ctx, conns)
	if err != nil {
		return err
	}
	defer db.Close()

	ws := river.NewWorkers()
	river.AddWorker(ws, river.WorkFunc(func(context.Context, *river.Job[args]) error { return nil }))
	rcfg, err := workers.RiverConfig(workers.RiverOpts{
		Queues: map[string]int{bustype.DefaultQueue(pool): maxWorkers}, Workers: ws, Config: workers.Config{Logger: benchkit.ChildLogger(os.Stderr)},
	})
	if err != nil {
		return err
	}
	client, err := river.NewClient(riverpgxv5.New(db), rcfg)
	if err != nil {
		return err
	}
	// River closes the channel when the client stops, after the last
	// completion stored.
	completed, _ := client.SubscribeConfig(&river.SubscribeConfig{
		Kinds:    []river.EventKind{river.EventKindJobCompleted},
		ChanSize: 100_000,
	})

	lines := bufio.NewReader(stdin)
	if err := benchkit.AwaitGo(lines, stdout); err != nil {
		return err
	}
	start := time.Now()
	if err := client.Start(ctx); err != nil {
		return err
	}
	// stdin closing is the signal to stop.
	stop := benchkit.StdinClosed(lines)
	var r Result
	count := func(ev *river.Event) {
		if ev != nil && ev.Kind == river.EventKindJobCompleted {
			r.Jobs++
			r.DoneSeconds = time.Since(start).Seconds()
		}
	}
wait:
	for {
		select {
		case ev := <-completed:
			count(ev)
		case <-stop:
			break wait
		case <-ctx.Done():
			return fmt.Errorf("not told to stop within %s", timeout)
		}
	}
	stopCtx, stopCancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer stopCancel()
	if err := client.Stop(stopCtx); err != nil {
		_ = client.StopAndCancel(context.Background())
	}
	for ev := range completed {
		count(ev)
	}
	return json.NewEncoder(stdout).Encode(r)
}
