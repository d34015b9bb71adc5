// Command fanoutproc is the fan-out process of the backlog benchmark
// (internal/bench): it runs the fan-out services with the default fanout.Config against
// DATABASE_URL until every pool's cursor reaches -target, then prints one
// JSON line with the catch-up time and its own peak RSS (VmHWM), and exits.
// It runs as a child process so that its memory is its own.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/riverbus/riverbus/fanout"
	"github.com/riverbus/riverbus/internal/engine"
	"github.com/riverbus/riverbus/internal/pools"
)

// Result is what fanoutproc prints.
type Result struct {
	ElapsedSeconds float64 `json:"elapsed_seconds"`
	PeakRSSBytes   int64   `json:"peak_rss_bytes"`
	Jobs           int64   `json:"jobs"`
}

func main() {
	target := flag.Int64("target", 0, "stop when every pool's cursor is at least this sequence")
	timeout := flag.Duration("timeout", 15*time.Minute, "give up after this long")
	flag.Parse()
	if err := run(*target, *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "fanoutproc:", err)
		os.Exit(1)
	}
}

func run(target int64, timeout time.Duration) error {
	url := os.Getenv("DATABASE_URL")
	if url == "" {
		return errors.New("DATABASE_URL is not set")
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return err
	}
	cfg.MaxConns = 10 // as `riverbus fanout`
	db, err := pgxpool.NewWithConfig(ctx, cfg)
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

	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	start := time.Now()
	f, err := engine.New(db, &fanout.Config{Logger: logger, OnBatch: func(b fanout.BatchResult) { reached(b.Pool, b.Cursor) }})
	if err != nil {
		return err
	}
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
	return json.NewEncoder(os.Stdout).Encode(Result{ElapsedSeconds: elapsed.Seconds(), PeakRSSBytes: hwm, Jobs: jobs})
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
