package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/riverbus/riverbus/fanout"
	"github.com/riverbus/riverbus/internal/bench/fanoutproc"
	"github.com/riverbus/riverbus/internal/bench/workerproc"
	"github.com/riverbus/riverbus/internal/benchkit"
	"github.com/riverbus/riverbus/workers"
)

// Sizes of the scale-out scenario.
const (
	// scaleOutEvents events are fanned out to each of scaleOutPools pools:
	// fan-out processes share the work pool by pool (the pool row's lock),
	// and each runs up to fanout.WorkersDefault batches at once, so 8 pools
	// keep 4 processes busy.
	scaleOutEvents = 25_000
	scaleOutPools  = 8
	// scaleOutJobs jobs of one pool are drained by the worker processes,
	// each working the pool's queue with drainWorkers workers over
	// scaleOutWorkerConns connections (as `riverbus work`).
	scaleOutJobs        = 50_000
	scaleOutWorkerConns = 10
	// scaleOutPollInterval is how often the parent looks for jobs not yet
	// completed while worker processes drain them. The time measured is the
	// processes' own, not the poll's.
	scaleOutPollInterval = 50 * time.Millisecond
)

// Process counts of the scale-out scenario.
var (
	scaleOutFanoutProcs = []int{1, 2, 4}
	scaleOutWorkerProcs = []int{1, 4, 8}
)

// childResult is the part of fanoutproc's and workerproc's results the
// scenario reads: the jobs the process inserted or completed, and the time
// from its start to the last of them that counts (see each command).
type childResult struct {
	Jobs        int64   `json:"jobs"`
	DoneSeconds float64 `json:"done_seconds"`
}

// scaleOutSample is one measurement: jobs/s, the share of the jobs the
// busiest process did, and how busy the machine's CPUs were (0 to 1; -1:
// unknown).
type scaleOutSample struct {
	rate, busiest, cpuBusy float64
}

// runScaleOut: 1, 2 and 4 fan-out processes (fanoutproc) catching up on a
// backlog for 8 pools, then 1, 4 and 8 worker processes (workerproc)
// draining one pool's jobs, all against one database; jobs/s for each
// count, beside the 1-process figure of the same run.
func runScaleOut(ctx context.Context, e *env) ([]Result, error) {
	bin, err := benchkit.Executable()
	if err != nil {
		return []Result{{Scenario: "scale-out", Metric: "-", Skipped: "cannot run the child processes: " + benchkit.OneLine(err.Error())}}, nil
	}
	events := e.Scaled(scaleOutEvents, least(e, 100, 20))
	jobs := e.Scaled(scaleOutJobs, least(e, 50, 16))

	fan := make(map[int][]scaleOutSample)
	work := make(map[int][]scaleOutSample)
	phases := []struct {
		what    string
		procs   []int
		measure func(procs int) (scaleOutSample, error)
		out     map[int][]scaleOutSample
	}{
		{"fan-out", scaleOutFanoutProcs, func(p int) (scaleOutSample, error) { return scaleOutFanout(ctx, e, bin, p, events) }, fan},
		{"worker", scaleOutWorkerProcs, func(p int) (scaleOutSample, error) { return scaleOutWork(ctx, e, bin, p, jobs) }, work},
	}
	for run := range e.Opts.Runs {
		for _, ph := range phases {
			// Alternate the order of the counts from run to run, as the
			// paired scenarios alternate their sides.
			procs := slices.Clone(ph.procs)
			if !riverbusFirst(run) {
				slices.Reverse(procs)
			}
			for _, p := range procs {
				s, err := ph.measure(p)
				if err != nil {
					return nil, fmt.Errorf("run %d, %d %s process(es): %w", run+1, p, ph.what, err)
				}
				e.Log.Info("bench: measured", "scenario", "scale-out", "run", run+1, "what", ph.what, "processes", p,
					"jobs_per_s", s.rate, "busiest_share", s.busiest, "cpu_busy", s.cpuBusy)
				ph.out[p] = append(ph.out[p], s)
			}
		}
	}

	cpus := fmt.Sprintf("%d CPU(s) run every process and the one PostgreSQL server: once they are busy, more processes add no throughput on this machine, so the rows show how the work divides and what more processes cost more than how far they scale", runtime.NumCPU())
	fanNote := fmt.Sprintf("%d events × %d pools = %d jobs; each process is fanoutproc (default fanout.Config: BatchSize %d, up to %d batches at once) and takes pools by locking the pool row FOR NO KEY UPDATE SKIP LOCKED; baseline = 1 process in the same run; by process count: %s; %s",
		events, scaleOutPools, events*scaleOutPools, fanout.BatchSizeDefault, fanout.WorkersDefault, shares(fan, scaleOutFanoutProcs), cpus)
	workNote := fmt.Sprintf("%d no-op jobs of one pool; each process is workerproc, a River client with riverbus worker settings (FetchCooldown %s, FetchPollInterval %s), MaxWorkers %d, %d connections, sharing the queue through River's fetch (FOR UPDATE SKIP LOCKED); timed from the start signal to the last completion; baseline = 1 process in the same run; by process count: %s; %s",
		jobs, workers.FetchCooldownDefault, workers.FetchPollIntervalDefault, drainWorkers, scaleOutWorkerConns, shares(work, scaleOutWorkerProcs), cpus)
	var rows []Result
	rows = append(rows, scaleOutRows("fan-out", fan, scaleOutFanoutProcs, fanNote)...)
	rows = append(rows, scaleOutRows("workers", work, scaleOutWorkerProcs, workNote)...)
	return rows, nil
}

// scaleOutRows turns the samples of each process count into rows, the
// first count being the baseline of the others.
func scaleOutRows(what string, samples map[int][]scaleOutSample, procs []int, note string) []Result {
	rates := func(p int) []float64 {
		var r []float64
		for _, s := range samples[p] {
			r = append(r, s.rate)
		}
		return r
	}
	base := rates(procs[0])
	var rows []Result
	for i, p := range procs {
		metric := fmt.Sprintf("%s, %d processes", what, p)
		if p == 1 {
			metric = fmt.Sprintf("%s, 1 process", what)
		}
		if i == 0 {
			rows = append(rows, Result{Scenario: "scale-out", Metric: metric, Unit: "jobs/s", Riverbus: benchkit.Summarize(base), Note: note})
			continue
		}
		rows = append(rows, paired("scale-out", metric, "jobs/s", rates(p), base, nil, note))
	}
	return rows
}

// shares writes, for each process count, the median share of the jobs the
// busiest process did and how busy the machine's CPUs were.
func shares(samples map[int][]scaleOutSample, procs []int) string {
	var parts []string
	for _, p := range procs {
		var most, busy []float64
		for _, s := range samples[p] {
			most = append(most, s.busiest)
			if s.cpuBusy >= 0 {
				busy = append(busy, s.cpuBusy)
			}
		}
		f := benchkit.Summarize(most)
		if f == nil {
			continue
		}
		part := fmt.Sprintf("%d: busiest process %.0f%% of the jobs", p, 100*f.Median)
		if b := benchkit.Summarize(busy); b != nil {
			part += fmt.Sprintf(", CPUs %.0f%% busy", 100*b.Median)
		}
		parts = append(parts, part)
	}
	return strings.Join(parts, "; ")
}

// scaleOutFanout measures procs fan-out processes catching up together on
// events events for scaleOutPools pools.
func scaleOutFanout(ctx context.Context, e *env, bin string, procs, events int) (scaleOutSample, error) {
	// The backlog's own Fanout stays unused: the processes fan out.
	b, err := newBacklog(ctx, e, false, poolConns, events, 0, scaleOutPools)
	if err != nil {
		return scaleOutSample{}, err
	}
	defer b.close()
	// Each process exits once every pool has caught up, whoever moved it.
	total := events * scaleOutPools
	s, err := measureChildren(ctx, procs, bin, b.d.URL, total, nil,
		fanoutproc.Name, "--target", strconv.FormatInt(b.last, 10), "--timeout", phaseTimeout.String())
	if err != nil {
		return scaleOutSample{}, err
	}
	return s, expectJobs(ctx, b.db, total, "")
}

// scaleOutWork measures procs worker processes draining jobs jobs of one
// pool together.
func scaleOutWork(ctx context.Context, e *env, bin string, procs, jobs int) (scaleOutSample, error) {
	b, err := newBacklog(ctx, e, false, poolConns, jobs, 0, 1)
	if err != nil {
		return scaleOutSample{}, err
	}
	defer b.close()
	if _, err := b.catchUp(ctx); err != nil {
		return scaleOutSample{}, err
	}
	if err := b.d.Settle(ctx, b.db); err != nil {
		return scaleOutSample{}, err
	}

	s, err := measureChildren(ctx, procs, bin, b.d.URL, jobs, func() error { return waitCompleted(ctx, b.db) },
		workerproc.Name, "--pool", benchKind, "--max-workers", strconv.Itoa(drainWorkers), "--conns", strconv.Itoa(scaleOutWorkerConns), "--timeout", phaseTimeout.String())
	if err != nil {
		return scaleOutSample{}, err
	}
	return s, expectJobs(ctx, b.db, jobs, "completed")
}

// waitCompleted waits until no job is left to complete.
func waitCompleted(ctx context.Context, db *pgxpool.Pool) error {
	deadline := time.Now().Add(phaseTimeout)
	for {
		var left bool
		if err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM river_job
			WHERE state IN ('available', 'pending', 'running', 'retryable', 'scheduled'))`).Scan(&left); err != nil {
			return err
		}
		if !left {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("jobs left to complete after %s", phaseTimeout)
		}
		select {
		case <-time.After(scaleOutPollInterval):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// runChildren starts procs children running bin with args (the
// subcommand first) against the database at url, waits until all are
// ready, calls starting (when set), starts them together, calls wait (when
// set) until their work is done, and returns the last line each printed:
// its result.
func runChildren(ctx context.Context, procs int, bin, url string, starting func(), wait func() error, args ...string) ([]string, error) {
	cs, err := benchkit.StartChildren(ctx, procs, bin, url, args, nil)
	if err != nil {
		return nil, err
	}
	defer benchkit.KillChildren(cs)
	if starting != nil {
		starting()
	}
	if err := benchkit.GoChildren(cs); err != nil {
		return nil, err
	}
	if wait != nil {
		if err := wait(); err != nil {
			return nil, err
		}
	}
	return benchkit.FinishChildren(cs)
}

// measureChildren runs procs children (runChildren), checks that the jobs
// they report add up to total, and returns total over the latest
// DoneSeconds, the busiest process's share, and how busy the CPUs were
// meanwhile.
func measureChildren(ctx context.Context, procs int, bin, url string, total int, wait func() error, args ...string) (scaleOutSample, error) {
	var cpu func() float64
	lines, err := runChildren(ctx, procs, bin, url, func() { cpu = startCPUBusy() }, wait, args...)
	if err != nil {
		return scaleOutSample{}, err
	}
	busy := cpu()
	var elapsed float64
	var sum, most int64
	perProc := make([]int64, len(lines))
	for i, line := range lines {
		var r childResult
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			return scaleOutSample{}, fmt.Errorf("%s printed %q: %w", args[0], line, err)
		}
		elapsed = max(elapsed, r.DoneSeconds)
		perProc[i] = r.Jobs
		sum += r.Jobs
		most = max(most, r.Jobs)
	}
	if sum != int64(total) {
		return scaleOutSample{}, fmt.Errorf("the processes report %d jobs (%v), expected %d", sum, perProc, total)
	}
	if elapsed <= 0 {
		return scaleOutSample{}, fmt.Errorf("no process reported when it finished (%v)", perProc)
	}
	return scaleOutSample{rate: float64(total) / elapsed, busiest: float64(most) / float64(total), cpuBusy: busy}, nil
}

// startCPUBusy starts watching how busy the machine's CPUs are (every
// process on it, PostgreSQL's included, from /proc/stat); the function it
// returns gives the busy fraction since, or -1 when /proc/stat cannot be
// read (not Linux).
func startCPUBusy() func() float64 {
	busy0, total0, ok0 := cpuTimes()
	return func() float64 {
		busy1, total1, ok1 := cpuTimes()
		if !ok0 || !ok1 || total1 <= total0 {
			return -1
		}
		return float64(busy1-busy0) / float64(total1-total0)
	}
}

// cpuTimes reads the CPUs' busy and total time, in ticks, from the first
// line of /proc/stat: "cpu user nice system idle iowait irq softirq steal
// ...". Idle and iowait are not busy; guest time is already in user.
func cpuTimes() (busy, total uint64, ok bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, false
	}
	line, _, _ := strings.Cut(string(b), "\n")
	fields := strings.Fields(line)
	if len(fields) < 9 || fields[0] != "cpu" {
		return 0, 0, false
	}
	for i, f := range fields[1:9] {
		v, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return 0, 0, false
		}
		total += v
		if i != 3 && i != 4 { // idle, iowait
			busy += v
		}
	}
	return busy, total, true
}
