package lanes

import (
	"bytes"
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/rivertype"
)

// Handoff is River worker middleware for ordered pools. When a job of an
// ordered pool (one whose metadata names a lane) succeeds, Handoff
// completes it within a commit instead of the hundreds of milliseconds
// River's batched completer waits for a batch to fill (it flushes every
// 250 ms below 100 finished jobs), and the database trigger hands the lane
// to the next job in the same transaction (migration 005). A key's events
// run one after another, so the time from one job's success to its
// successor becoming available is what bounds an ordered pool: at a hand-off
// per 250 ms a key runs four events a second.
//
// Completions are grouped, as group commit groups WAL flushes: the first
// succeeded lane job starts a flush, and every lane job that succeeds
// while a flush runs joins the next one, so a busy process commits many
// hand-offs per transaction and an idle one commits each at once, with no
// timer. The worker returns once its flush has committed (or failed), and
// only then does River's completer get the job: its statement then finds
// the job completed already, leaves it, and still emits River's completed
// event. A worker that returned first would race the completer for the
// same rows: deadlocks, and completed events River drops when its
// statement's snapshot still saw the job running. If a flush fails (the
// database restarting, say), River's completer completes the jobs a little
// later and the trigger hands their lanes on then: nothing is lost, only
// the shortcut.
//
// A job waiting for its flush holds one of its queue's River worker
// slots, and River fetches only as many jobs as it has free slots: with
// every slot waiting for a flush, a busy ordered queue fetches in small
// bites while jobs sit available. So a queue of ordered pools gets more
// River slots than handlers (NewHandoff's limits, workers.RiverConfig's
// Opts.Ordered): its handlers run at most limit at a time, and the extra
// slots are what flush waits and fetches ahead use. A job fetched ahead
// waits for a handler slot, in arrival order, and its JobTimeout
// runs while it waits; if its context ends before a slot frees (the
// client stopping, the timeout), it is snoozed back to available without
// costing an attempt, keeping its lane.
//
// workers.RiverConfig installs it. Jobs of unordered pools in queues
// without a limit pass through untouched.
type Handoff struct {
	river.MiddlewareDefaults

	// limits caps the handlers running at once per River queue; queues
	// without an entry are not capped here (River's MaxWorkers is).
	limits map[string]chan struct{}

	mu       sync.Mutex
	queue    []handoffJob
	flushing bool
}

type handoffJob struct {
	// ctx is the job's work context without its cancellation: it still
	// carries the River client and whatever output the worker recorded,
	// which JobCompleteTx stores as River's completer would.
	ctx    context.Context
	client *river.Client[pgx.Tx]
	job    *rivertype.JobRow
	// done is closed when the flush holding the job has ended.
	done chan struct{}
}

// NewHandoff returns a Handoff that runs at most limits[queue] handlers
// of a queue at once. The caller gives those queues more River slots than
// that (workers.RiverConfig gives them OrderedSlotsFactor times as many).
func NewHandoff(limits map[string]int) *Handoff {
	m := &Handoff{limits: make(map[string]chan struct{}, len(limits))}
	for queue, n := range limits {
		m.limits[queue] = make(chan struct{}, max(n, 1))
	}
	return m
}

// OrderedSlotsFactor is how many River slots a queue of ordered pools gets
// for each handler it may run: a slot per handler, and one more for a job
// waiting for its flush or fetched ahead of a free handler, so that River
// keeps fetching while jobs wait for their flush; more slots only let more
// jobs wait (docs/performance.md, "Measured and left out").
const OrderedSlotsFactor = 2

// handoffTimeout bounds one flush's statement.
const handoffTimeout = 10 * time.Second

type handoffArgs struct{}

func (handoffArgs) Kind() string { return "" }

// Work runs the job and, for a lane job that succeeded, completes it in
// the next flush and waits for that flush.
func (m *Handoff) Work(ctx context.Context, job *rivertype.JobRow, doInner func(context.Context) error) error {
	run := doInner
	if sem := m.limits[job.Queue]; sem != nil {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			// Never started: back to available at once, no attempt spent.
			return river.JobSnooze(0)
		}
		run = func(ctx context.Context) error {
			defer func() { <-sem }() // a panic, recovered by River, frees it too
			return doInner(ctx)
		}
	}
	if !hasLane(job.Metadata) {
		return run(ctx)
	}
	if err := run(ctx); err != nil {
		return err
	}
	client, err := river.ClientFromContextSafely[pgx.Tx](ctx)
	if err != nil {
		return nil // not under a River client: River completes it as usual
	}
	done := make(chan struct{})
	m.mu.Lock()
	m.queue = append(m.queue, handoffJob{ctx: context.WithoutCancel(ctx), client: client, job: job, done: done})
	start := !m.flushing
	m.flushing = true
	m.mu.Unlock()
	if start {
		go m.flush()
	}
	<-done // bounded by handoffTimeout
	return nil
}

// flush completes queued jobs, a statement per batch, until the queue
// is empty.
func (m *Handoff) flush() {
	for {
		m.mu.Lock()
		batch := m.queue
		m.queue = nil
		if len(batch) == 0 {
			m.flushing = false
			m.mu.Unlock()
			return
		}
		m.mu.Unlock()
		// A process has one River client, so one statement; group by
		// client all the same.
		for len(batch) > 0 {
			client := batch[0].client
			var same, rest []handoffJob
			for _, j := range batch {
				if j.client == client {
					same = append(same, j)
				} else {
					rest = append(rest, j)
				}
			}
			complete(same)
			for _, j := range same {
				close(j.done)
			}
			batch = rest
		}
	}
}

// complete completes jobs of one client in one statement, River's own
// (the statement its completer runs), so the lane trigger hands every
// lane on at once: one statement per job repeats the trigger's work each
// time, and was slower than waiting for River's completer. When it fails,
// River's completer completes them. Output a worker recorded is not
// passed: River's completer merges it into the completed job's metadata
// when it gets the job (its statement merges metadata whatever the state).
func complete(jobs []handoffJob) {
	ctx, cancel := context.WithTimeout(jobs[0].ctx, handoffTimeout)
	defer cancel()
	client := jobs[0].client
	now := time.Now().UTC()
	p := &riverdriver.JobSetStateIfRunningManyParams{
		ID:              make([]int64, len(jobs)),
		Attempt:         make([]*int, len(jobs)),
		ErrData:         make([][]byte, len(jobs)),
		FinalizedAt:     make([]*time.Time, len(jobs)),
		MetadataDoMerge: make([]bool, len(jobs)),
		MetadataUpdates: make([][]byte, len(jobs)),
		ScheduledAt:     make([]*time.Time, len(jobs)),
		State:           make([]rivertype.JobState, len(jobs)),
	}
	for i, j := range jobs {
		one := riverdriver.JobSetStateCompleted(j.job.ID, now, nil)
		p.ID[i], p.Attempt[i], p.ErrData[i], p.FinalizedAt[i] = one.ID, one.Attempt, one.ErrData, one.FinalizedAt
		p.MetadataDoMerge[i], p.MetadataUpdates[i], p.ScheduledAt[i], p.State[i] = one.MetadataDoMerge, one.MetadataUpdates, one.ScheduledAt, one.State
	}
	_, _ = client.Pilot().JobSetStateIfRunningMany(ctx, client.Driver().GetExecutor(), p)
}

// hasLane reports whether job metadata names an ordering lane (a cheap text
// test: the key appears in the JSON only as the lane's key).
func hasLane(metadata []byte) bool { return bytes.Contains(metadata, []byte(`"`+MetadataKey+`"`)) }
