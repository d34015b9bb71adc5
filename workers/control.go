package workers

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/rivertype"

	"github.com/riverbus/riverbus/internal/health"
)

// River's notification topics (its internal/notifier), as the listener
// returns them: without the schema prefix of the channel.
const (
	topicControl    = "river_control"
	topicLeadership = "river_leadership"
)

// River's control actions (producer.go, controlAction*) and its name for
// every queue, and the leadership action that makes a leader resign
// (internal/leadership).
const (
	actionCancel          = "cancel"
	actionMetadataChanged = "metadata_changed"
	actionPause           = "pause"
	actionResume          = "resume"
	allQueues             = "*"
	actionRequestResign   = "request_resign"
)

const (
	// controlReconcileInterval is how often the listener passes on the
	// state river_queue holds for every queue, and the cancel requests of
	// running jobs it has not passed on yet: a pause or resume lost
	// anywhere, and a cancel lost before its check (the listener was
	// reconnecting, the check failed, too many messages were waiting),
	// take effect within this interval, where River's own poll takes a
	// minute. A confirmed cancel that River's notifier then drops (its
	// buffer full of other messages) waits for River's poll.
	controlReconcileInterval = 5 * time.Second

	// controlPendingMax is how many control messages may wait for their
	// check. Beyond it (a neighbour spraying faster than the checks run)
	// messages are dropped: a real one then takes effect at the next
	// reconcile.
	controlPendingMax = 10_000

	// resignIntervalMin is the least time between two resign requests the
	// listener passes on. A resign request has nothing in the database to
	// check it against, and one repeated would keep River's maintenance
	// (the scheduler that makes retries due, the rescuer) from running.
	resignIntervalMin = time.Minute

	controlBatchMax  = 1_000  // messages checked with one pair of statements
	reconcileListMax = 10_000 // queues, and running jobs with a cancel request, one reconcile reads
)

// sqlCancelRequested selects, among the ids a batch of cancel messages
// names, the running jobs River's JobCancel marked: it writes
// cancel_attempted_at into the job's metadata in the statement that sends
// the message, so a real message's row shows it once the message arrives.
// River's own poll for cancellations uses the same condition.
const sqlCancelRequested = `id = any(@ids::bigint[]) AND state = 'running' AND metadata ? 'cancel_attempted_at'`

// sqlCancelRequestedAll is sqlCancelRequested for every running job.
const sqlCancelRequestedAll = `state = 'running' AND metadata ? 'cancel_attempted_at'`

// controlMessage is the payload of River's control messages
// (controlEventPayload).
type controlMessage struct {
	Action   string          `json:"action"`
	JobID    int64           `json:"job_id,omitempty"`
	Metadata json.RawMessage `json:"metadata,omitempty"`
	Queue    string          `json:"queue"`
}

// leadershipMessage is the payload of River's leadership messages.
type leadershipMessage struct {
	Action string `json:"action"`
}

// controlListener is River's listener with the control channel checked.
// Messages on other topics pass through: an insert message only makes a
// producer fetch sooner (a fetch takes only what the database holds), and
// a leader's "resigned" only makes the others try the election, which the
// database decides. A resign request passes at most once per
// resignIntervalMin.
//
// River's notifier calls WaitForNotification from one goroutine at a time
// and cancels its context to run LISTEN, UNLISTEN or a ping on the
// connection. Control messages go to a checker goroutine, which runs while
// the listener is connected; what it confirms is returned by a later
// WaitForNotification, which stops waiting on the connection for it.
type controlListener struct {
	riverdriver.Listener

	exec   riverdriver.Executor
	schema string
	logger *slog.Logger

	pending chan controlMessage            // to the checker
	checked chan *riverdriver.Notification // from the checker

	// Touched only by the goroutine in WaitForNotification.
	held       []*riverdriver.Notification
	lastResign time.Time

	mu   sync.Mutex
	stop context.CancelFunc
	done chan struct{}

	overflowed atomic.Int64 // control messages dropped: pending or checked full

	// Touched only by the checker.
	passedCancels  map[int64]struct{}
	refused        int
	checkErrors    int
	lastCheckError error
}

func newControlListener(inner riverdriver.Listener, exec riverdriver.Executor, schema string, logger *slog.Logger) *controlListener {
	return &controlListener{
		Listener:      inner,
		exec:          exec,
		schema:        schema,
		logger:        logger,
		pending:       make(chan controlMessage, controlPendingMax),
		checked:       make(chan *riverdriver.Notification, controlPendingMax),
		passedCancels: map[int64]struct{}{},
	}
}

// Connect connects River's listener and starts the checker.
func (l *controlListener) Connect(ctx context.Context) error {
	if err := l.Listener.Connect(ctx); err != nil {
		return setUpError(ctx, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stop == nil {
		ctx, stop := context.WithCancel(context.WithoutCancel(ctx))
		l.stop, l.done = stop, make(chan struct{})
		go l.runChecker(ctx, l.done)
	}
	return nil
}

// Listen subscribes River's listener to topic.
func (l *controlListener) Listen(ctx context.Context, topic string) error {
	return setUpError(ctx, l.Listener.Listen(ctx, topic))
}

// setUpError keeps an error of setting up River's listener from reading
// as River's own shutdown. A River producer that starts while the
// listener's connection closes (the database restarting, say) gets "conn
// closed" from its subscription, which River takes for the client
// stopping: the producer returns without error and never fetches, while
// the client runs on as started. Said otherwise, the error fails Start,
// and the process says so and starts again, unless the client is in fact
// stopping (ctx done).
func setUpError(ctx context.Context, err error) error {
	if err == nil || ctx.Err() != nil || !strings.HasSuffix(err.Error(), "conn closed") {
		return err
	}
	return fmt.Errorf("riverbus: River's listener lost its connection while subscribing (%w); the workers did not start", err)
}

// Close stops the checker and closes River's listener.
func (l *controlListener) Close(ctx context.Context) error {
	l.mu.Lock()
	stop, done := l.stop, l.done
	l.stop, l.done = nil, nil
	l.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
	return l.Listener.Close(ctx)
}

type waitResult struct {
	notification *riverdriver.Notification
	err          error
}

// WaitForNotification returns the next message River may act on: one of
// another topic as it arrived, or one the checker confirmed.
func (l *controlListener) WaitForNotification(ctx context.Context) (*riverdriver.Notification, error) {
	for {
		if err := ctx.Err(); err != nil {
			return nil, err // River's notifier wants the connection
		}
		if len(l.held) > 0 {
			n := l.held[0]
			l.held = l.held[1:]
			return n, nil
		}
		select {
		case n := <-l.checked:
			return n, nil
		default:
		}

		waitCtx, cancel := context.WithCancel(ctx)
		got := make(chan waitResult, 1)
		go func() {
			n, err := l.Listener.WaitForNotification(waitCtx)
			got <- waitResult{n, err}
		}()
		var (
			res     waitResult
			checked *riverdriver.Notification
		)
		select {
		case res = <-got:
		case checked = <-l.checked:
			// Free the connection; a message read meanwhile is kept.
			cancel()
			res = <-got
		}
		cancel()

		if res.err != nil {
			if checked != nil {
				// Our own cancel, most likely; a broken connection
				// fails the next wait again.
				return checked, nil
			}
			return nil, res.err
		}
		passed := l.sort(res.notification)
		switch {
		case checked != nil && passed != nil:
			l.held = append(l.held, passed)
			return checked, nil
		case checked != nil:
			return checked, nil
		case passed != nil:
			return passed, nil
		}
	}
}

// sort returns n when River may act on it as it is; a control message goes
// to the checker instead, and a resign request too soon after the last one
// is dropped.
func (l *controlListener) sort(n *riverdriver.Notification) *riverdriver.Notification {
	switch n.Topic {
	case topicControl:
		var msg controlMessage
		if err := json.Unmarshal([]byte(n.Payload), &msg); err != nil {
			return nil // River would drop it too
		}
		select {
		case l.pending <- msg:
		default:
			l.overflowed.Add(1) // the reconcile heals it
		}
		return nil
	case topicLeadership:
		var msg leadershipMessage
		if err := json.Unmarshal([]byte(n.Payload), &msg); err != nil || msg.Action != actionRequestResign {
			return n
		}
		if now := time.Now(); now.Sub(l.lastResign) >= resignIntervalMin {
			l.lastResign = now
			return n
		}
		return nil
	default:
		return n
	}
}

func (l *controlListener) runChecker(ctx context.Context, done chan struct{}) {
	defer close(done)
	ticker := time.NewTicker(controlReconcileInterval)
	defer ticker.Stop()
	// Messages sent while the listener was not connected never arrive.
	l.reconcile(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			l.reconcile(ctx)
			l.report()
		case msg := <-l.pending:
			batch := []controlMessage{msg}
		drain:
			for len(batch) < controlBatchMax {
				select {
				case msg := <-l.pending:
					batch = append(batch, msg)
				default:
					break drain
				}
			}
			l.check(ctx, batch)
		}
	}
}

// check passes on what the database confirms of batch: a cancel of a
// running job River's JobCancel marked, and for every queue a pause,
// resume or metadata message names (every queue for "*"), the state
// river_queue holds now. The database is read after the messages arrived,
// so after the transactions that sent them committed: a real message is
// confirmed, or superseded by a later change whose own message follows.
func (l *controlListener) check(ctx context.Context, batch []controlMessage) {
	var (
		cancelIDs   []int64
		stateOf     = map[string]string{} // queue → action asked
		metadataOf  = map[string]bool{}
		allState    bool
		allMetadata bool
	)
	for _, msg := range batch {
		switch msg.Action {
		case actionCancel:
			cancelIDs = append(cancelIDs, msg.JobID)
		case actionPause, actionResume:
			if msg.Queue == allQueues {
				allState = true
			} else {
				stateOf[msg.Queue] = msg.Action
			}
		case actionMetadataChanged:
			if msg.Queue == allQueues {
				allMetadata = true
			} else {
				metadataOf[msg.Queue] = true
			}
		default:
			l.refused++ // River ignores unknown actions too
		}
	}

	var out []*riverdriver.Notification
	if len(cancelIDs) > 0 {
		jobs, err := l.cancelRequested(ctx, cancelIDs)
		if err != nil {
			l.checkFailed(ctx, err)
		} else {
			l.refused += len(cancelIDs) - len(jobs)
			out = append(out, l.cancels(jobs)...)
		}
	}
	if allState || allMetadata || len(stateOf) > 0 || len(metadataOf) > 0 {
		queues, err := l.exec.QueueList(ctx, &riverdriver.QueueListParams{Max: reconcileListMax, Schema: l.schema})
		if err != nil {
			l.checkFailed(ctx, err)
		} else {
			for _, q := range queues {
				asked, named := stateOf[q.Name]
				if named && asked != queueAction(q) {
					l.refused++
				}
				if allState || named {
					out = append(out, queueStateNotification(q))
				}
				if allMetadata || metadataOf[q.Name] {
					out = append(out, queueMetadataNotification(q))
				}
			}
		}
	}
	l.pass(out)
}

// reconcile passes on the state of every queue river_queue holds (a
// producer ignores a pause while paused and a resume while running) and a
// cancel for every running job River's JobCancel marked that it has not
// passed on yet.
func (l *controlListener) reconcile(ctx context.Context) {
	var out []*riverdriver.Notification
	queues, err := l.exec.QueueList(ctx, &riverdriver.QueueListParams{Max: reconcileListMax, Schema: l.schema})
	if err != nil {
		l.checkFailed(ctx, err)
	} else {
		for _, q := range queues {
			out = append(out, queueStateNotification(q))
		}
	}
	jobs, err := l.cancelRequested(ctx, nil)
	if err != nil {
		l.checkFailed(ctx, err)
	} else {
		marked := make(map[int64]struct{}, len(jobs))
		var fresh []*rivertype.JobRow
		for _, job := range jobs {
			marked[job.ID] = struct{}{}
			if _, passed := l.passedCancels[job.ID]; !passed {
				fresh = append(fresh, job)
			}
		}
		// Forget jobs no longer running with a request: a later attempt
		// of the same job is cancelled only by a request of its own.
		for id := range l.passedCancels {
			if _, ok := marked[id]; !ok {
				delete(l.passedCancels, id)
			}
		}
		out = append(out, l.cancels(fresh)...)
	}
	l.pass(out)
}

// cancelRequested returns the running jobs among ids (nil: every running
// job) that River's JobCancel marked.
func (l *controlListener) cancelRequested(ctx context.Context, ids []int64) ([]*rivertype.JobRow, error) {
	params := &riverdriver.JobListParams{
		Max:           reconcileListMax,
		OrderByClause: "id",
		Schema:        l.schema,
		WhereClause:   sqlCancelRequestedAll,
	}
	if ids != nil {
		params.NamedArgs = map[string]any{"ids": ids}
		params.WhereClause = sqlCancelRequested
	}
	return l.exec.JobList(ctx, params)
}

func (l *controlListener) cancels(jobs []*rivertype.JobRow) []*riverdriver.Notification {
	out := make([]*riverdriver.Notification, 0, len(jobs))
	for _, job := range jobs {
		l.passedCancels[job.ID] = struct{}{}
		out = append(out, controlNotification(controlMessage{Action: actionCancel, JobID: job.ID, Queue: job.Queue}))
	}
	return out
}

// pass hands out to WaitForNotification. When its buffer is full (River is
// not reading), the rest waits for the next reconcile.
func (l *controlListener) pass(out []*riverdriver.Notification) {
	for i, n := range out {
		select {
		case l.checked <- n:
		default:
			l.overflowed.Add(int64(len(out) - i))
			return
		}
	}
}

func (l *controlListener) checkFailed(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return // stopping
	}
	l.checkErrors++
	l.lastCheckError = err
}

// report logs, at most once per reconcile, what the checker refused or
// could not check since the last report.
func (l *controlListener) report() {
	if l.refused > 0 {
		l.logger.Warn("riverbus: River control messages dropped: the database does not confirm them (forged, or superseded by a later change)",
			slog.Int("messages", l.refused))
	}
	if n := l.overflowed.Swap(0); n > 0 {
		l.logger.Warn("riverbus: River control messages dropped: more arrived than the checks keep up with; the reconcile passes on what the database holds",
			slog.Int64("messages", n))
	}
	if l.checkErrors > 0 {
		l.logger.Error("riverbus: checking River control messages failed; the next reconcile passes on what the database holds",
			health.Operation(health.OpControlCheck), slog.Int("failures", l.checkErrors), slog.String("err", l.lastCheckError.Error()))
	}
	l.refused, l.checkErrors, l.lastCheckError = 0, 0, nil
}

func queueAction(q *rivertype.Queue) string {
	if q.PausedAt != nil {
		return actionPause
	}
	return actionResume
}

func queueStateNotification(q *rivertype.Queue) *riverdriver.Notification {
	return controlNotification(controlMessage{Action: queueAction(q), Queue: q.Name})
}

func queueMetadataNotification(q *rivertype.Queue) *riverdriver.Notification {
	return controlNotification(controlMessage{Action: actionMetadataChanged, Metadata: q.Metadata, Queue: q.Name})
}

func controlNotification(msg controlMessage) *riverdriver.Notification {
	payload, err := json.Marshal(msg)
	if err != nil {
		// A struct of strings, an int and JSON River stored: cannot fail.
		panic(err)
	}
	return &riverdriver.Notification{Topic: topicControl, Payload: string(payload)}
}
