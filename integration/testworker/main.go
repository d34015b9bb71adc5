// Command testworker is a pool worker process for the integration tests:
// it works one pool's jobs with a River client configured by
// workers.RiverConfig and records what it did in tables the tests read.
//
//	testworker -pool NAME -mode record|projection|ordered [-fail-first-attempt-every N]
//
// record: each attempt is a row in it_attempt (sequence, job, attempt,
// worker); an event whose data has "fail": true fails every attempt; with
// -fail-first-attempt-every N, an event whose sequence is a multiple of N
// fails its first attempt.
//
// ordered: each attempt sleeps up to -max-delay, fails with probability
// -fail-rate (always for an event whose data has "fail": true), and is
// recorded in it_run with its start and end times and
// whether it succeeded.
//
// print: each attempt prints a line "delivered seq=S job=J event=E key=K
// attempt=A" to standard output before it sleeps -max-delay (with
// -slow-through N, only sequences up to N sleep) and succeeds:
// a record that outlives the database (a failover test loses the primary
// and everything on it).
//
// projection: the exactly-once helper adds one to it_projection for the
// event's key and records the sequence in it_applied, in the transaction
// that completes the job.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/riverbus/riverbus"
	"github.com/riverbus/riverbus/workers"
)

var (
	poolName  string
	mode      string
	failEvery int64
	failRate  float64
	maxDelay  time.Duration
	// slowThrough: in print mode, only sequences up to it sleep maxDelay.
	slowThrough int64
	workerID    string
	db          *pgxpool.Pool
)

type args struct {
	workers.Args
}

// Kind is the pool name, set from the command line before the client
// starts: River looks a worker up by the kind it reports.
func (args) Kind() string { return poolName }

type worker struct {
	river.WorkerDefaults[args]
}

func (w *worker) NextRetry(*river.Job[args]) time.Time { return time.Now().Add(50 * time.Millisecond) }

func (w *worker) Work(ctx context.Context, job *river.Job[args]) error {
	switch mode {
	case "print":
		fmt.Printf("delivered seq=%d job=%d event=%s key=%s attempt=%d\n",
			job.Args.GlobalSequence, job.ID, job.Args.EventID, job.Args.Key, job.Attempt)
		hold := maxDelay
		if slowThrough > 0 && job.Args.GlobalSequence > slowThrough {
			hold = 0
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(hold):
		}
		return nil
	case "ordered":
		started := time.Now()
		if maxDelay > 0 {
			time.Sleep(time.Duration(rand.Int64N(int64(maxDelay))))
		}
		var data struct {
			Fail bool `json:"fail"`
		}
		_ = json.Unmarshal(job.Args.Data, &data)
		failed := data.Fail || rand.Float64() < failRate
		if _, err := db.Exec(ctx, `INSERT INTO it_run (sequence, key, attempt, worker, started_at, finished_at, ok) VALUES ($1, $2, $3, $4, $5, clock_timestamp(), $6)`,
			job.Args.GlobalSequence, job.Args.Key, job.Attempt, workerID, started, !failed); err != nil {
			return err
		}
		if failed {
			return errors.New("testworker: transient failure")
		}
		return nil
	case "projection":
		return workers.RunExactlyOnce(ctx, db, job, func(ctx context.Context, tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO it_projection (key, events) VALUES ($1, 1)
				ON CONFLICT (key) DO UPDATE SET events = it_projection.events + 1`, job.Args.Key); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO it_applied (sequence, times) VALUES ($1, 1)
				ON CONFLICT (sequence) DO UPDATE SET times = it_applied.times + 1`, job.Args.GlobalSequence)
			return err
		})
	default:
		if _, err := db.Exec(ctx, `INSERT INTO it_attempt (sequence, job_id, attempt, worker, late) VALUES ($1, $2, $3, $4, $5)`,
			job.Args.GlobalSequence, job.ID, job.Attempt, workerID, job.Args.Late); err != nil {
			return err
		}
		var data struct {
			Fail bool `json:"fail"`
		}
		_ = json.Unmarshal(job.Args.Data, &data)
		if data.Fail {
			return errors.New("testworker: this event always fails")
		}
		if failEvery > 0 && job.Args.GlobalSequence%failEvery == 0 && job.Attempt == 1 {
			return fmt.Errorf("testworker: first attempt of sequence %d fails", job.Args.GlobalSequence)
		}
		return nil
	}
}

const schema = `
CREATE TABLE IF NOT EXISTS it_attempt (sequence bigint NOT NULL, job_id bigint NOT NULL, attempt int NOT NULL,
	worker text NOT NULL, late boolean NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE TABLE IF NOT EXISTS it_projection (key text PRIMARY KEY, events bigint NOT NULL);
CREATE TABLE IF NOT EXISTS it_applied (sequence bigint PRIMARY KEY, times int NOT NULL);
CREATE TABLE IF NOT EXISTS it_run (sequence bigint NOT NULL, key text NOT NULL, attempt int NOT NULL, worker text NOT NULL,
	started_at timestamptz NOT NULL, finished_at timestamptz NOT NULL, ok boolean NOT NULL);`

func main() {
	flag.StringVar(&poolName, "pool", "", "pool to work")
	flag.StringVar(&mode, "mode", "record", "record, print, ordered or projection")
	flag.Int64Var(&failEvery, "fail-first-attempt-every", 0, "fail the first attempt of sequences that are multiples of this")
	flag.StringVar(&workerID, "id", fmt.Sprint(os.Getpid()), "worker id recorded with each attempt")
	flag.Float64Var(&failRate, "fail-rate", 0, "ordered mode: share of attempts that fail")
	flag.DurationVar(&maxDelay, "max-delay", 0, "ordered mode: longest an attempt sleeps; print mode: how long it sleeps")
	flag.Int64Var(&slowThrough, "slow-through", 0, "print mode: only events with sequences up to this one sleep (0: all)")
	concurrency := flag.Int("concurrency", 10, "jobs worked at once")
	rescueAfter := flag.Duration("rescue-after", 6*time.Second, "River's RescueStuckJobsAfter")
	flag.Parse()
	if poolName == "" {
		fmt.Fprintln(os.Stderr, "testworker: -pool is required")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *concurrency, *rescueAfter); err != nil {
		fmt.Fprintln(os.Stderr, "testworker:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, concurrency int, rescueAfter time.Duration) error {
	// As a deployment would: riverbus's session limits over the DBA's
	// that chaos sets on the database.
	poolCfg, err := pgxpool.ParseConfig(os.Getenv("DATABASE_URL"))
	if err != nil {
		return err
	}
	riverbus.ConfigurePool(poolCfg)
	// As `riverbus work` sizes its pool: River's fetch, completer, notifier
	// and leader beside the jobs that hold a connection (an ordered job's
	// lane hand-off, a big event's read), not pgx's default of four.
	poolCfg.MaxConns = int32(max(10, min(concurrency+5, 50)))
	db, err = pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		return err
	}
	defer db.Close()
	if mode != "print" {
		if _, err := db.Exec(ctx, schema); err != nil {
			return err
		}
	}
	var (
		queue   string
		ordered bool
	)
	if err := db.QueryRow(ctx, `SELECT queue, ordering <> 'none' FROM riverbus_pool WHERE name = $1`, poolName).Scan(&queue, &ordered); err != nil {
		return fmt.Errorf("read pool: %w", err)
	}
	ws := river.NewWorkers()
	river.AddWorker(ws, &worker{})
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	opts := workers.RiverOpts{Queues: map[string]int{queue: concurrency}, Workers: ws, Config: workers.Config{JobTimeout: 5 * time.Second, RescueStuckJobsAfter: rescueAfter, Logger: logger}}
	if ordered {
		// As a riverbus.Client binds an ordered pool's queue: more River
		// slots than handlers.
		opts.Ordered = []string{queue}
	}
	cfg, err := workers.RiverConfig(opts)
	if err != nil {
		return err
	}
	cfg.ID = "testworker-" + workerID
	client, err := river.NewClient(workers.NewDriver(db, cfg.Logger), cfg)
	if err != nil {
		return err
	}
	if err := client.Start(ctx); err != nil {
		return err
	}
	fmt.Println("ready")
	<-ctx.Done()
	stopCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return client.Stop(stopCtx)
}

var _ rivertype.JobArgs = args{}
