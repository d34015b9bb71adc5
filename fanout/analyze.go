package fanout

import (
	"context"
	"log/slog"
	"sync"

	"github.com/riverbus/riverbus/internal/health"
)

// analyzeJobsMinDefault is how many jobs the fan-out inserts before it
// first analyzes river_job (jobAnalyzer).
const analyzeJobsMinDefault = 10_000

// jobAnalyzer runs ANALYZE river_job when the fan-out has inserted at least
// as many jobs as the table held when it was last analyzed (and at least
// min): a pool rebuilding a backlog grows river_job many times over in
// seconds, faster than autovacuum looks at it (autovacuum_naptime, a minute
// by default). Until then River's producers keep the fetch plan the planner
// chose for the small table, a cached generic plan of two sequential scans
// of river_job, so every fetch of every queue (a live pool's too) reads the
// whole table, a cost that grows with the rebuild. ANALYZE
// invalidates the cached plans and the next ones use the fetch index. The
// threshold doubles with the table, so a rebuild costs a logarithmic
// number of ANALYZEs, each reading a bounded sample. A role that does not
// own river_job gets a warning from PostgreSQL and nothing happens.
type jobAnalyzer struct {
	f      *Fanout
	min    int
	logger *slog.Logger

	wg       sync.WaitGroup
	mu       sync.Mutex
	running  bool
	inserted int     // jobs inserted since the last ANALYZE began
	known    float64 // river_job's rows according to the last ANALYZE
}

// add counts n jobs inserted and starts an ANALYZE in a goroutine of its
// own when they reach the threshold and none is running; done is called
// after it.
func (a *jobAnalyzer) add(ctx context.Context, n int, done func()) {
	if n <= 0 {
		return
	}
	a.mu.Lock()
	a.inserted += n
	start := !a.running && float64(a.inserted) >= max(float64(a.min), a.known)
	if start {
		a.running, a.inserted = true, 0
	}
	a.mu.Unlock()
	if !start {
		return
	}
	a.wg.Go(func() {
		known, err := a.analyze(ctx)
		a.mu.Lock()
		a.running = false
		if err == nil {
			a.known = known
		}
		a.mu.Unlock()
		if err != nil && ctx.Err() == nil {
			a.logger.Warn("analyze river_job failed", health.Operation(health.OpAnalyzeJobs), "error", err)
		}
		done()
	})
}

// count counts n jobs inserted without starting an ANALYZE: the next add
// does, if they reach the threshold.
func (a *jobAnalyzer) count(n int) {
	a.mu.Lock()
	a.inserted += max(n, 0)
	a.mu.Unlock()
}

// wait waits for the ANALYZE running, if any.
func (a *jobAnalyzer) wait() { a.wg.Wait() }

func (a *jobAnalyzer) analyze(ctx context.Context) (float64, error) {
	if _, err := a.f.db.Exec(ctx, sqlAnalyzeJobs); err != nil {
		return 0, err
	}
	var rows float64
	err := a.f.db.QueryRow(ctx, sqlJobRows).Scan(&rows)
	return rows, err
}
