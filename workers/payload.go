package workers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/riverbus/riverbus/internal/riversql"
)

// payloadInLog is the key of a reference to an event's payload in a job's
// args (bustype.EventJobRef): a quick test for args that may hold one
// (event data that merely contains the text costs a decode, and changes
// nothing).
var payloadInLog = []byte(`"payload_in_log"`)

// resolvePayloads is a River hook that gives a job whose args refer to big
// events' payloads (riversql.PayloadInlineMax) those payloads from
// riverbus_event, just before River decodes the args for the worker: a
// handler always gets whole events, whatever size an appender made them. A
// WorkBegin hook rather than middleware, because River runs it after every
// middleware, the worker's own included, so a worker that reads the log
// itself (the webhook) can say so (SkipPayloads) and spare the transfer. It
// reads through the River client working the job, in the job's own time and
// retries, not in River's fetch, which has a fixed timeout and fetches many
// jobs at once.
//
// An event the log no longer holds fails the job with an error naming it:
// the job retries and ends a dead letter, never a handler run on an event
// without its data.
//
// River bounds only the worker's Work by JobTimeout, not its hooks, and
// takes a job still running RescueStuckJobsAfter after its attempt began
// for one whose process died: it makes the job available again while the
// first attempt goes on. A read of tens of megabytes on a busy server can
// take longer than that margin; each rescue then starts another read of
// the same payload beside the first, which slows every read further, and
// the pool stops finishing anything while the process's memory grows
// without bound. So a read gets at most half the margin River leaves
// beside JobTimeout (budget), and a process reads at most PayloadReadsMax
// jobs' payloads at once: a job that finds them all taken for half its
// budget is snoozed (River retries it soon, without using an attempt,
// here or in another process), and a read that outlives its budget fails
// the attempt with an error that names the setting to raise.
type resolvePayloads struct {
	river.HookDefaults

	budget      time.Duration // the most one job spends waiting for and reading its payloads
	rescueAfter time.Duration // the client's RescueStuckJobsAfter, for the error
	reads       chan struct{} // a token per read in flight: payloadReads, but in tests
}

// PayloadReadsMax is how many jobs' big payloads one process reads at once,
// whatever reads them (this hook, the webhook worker) and however many
// clients it runs. Each read holds a few copies of payloads of up to the
// log's event limit in memory, so this bounds a worker process's memory
// whatever its concurrency; reads of big payloads are bound by the
// server's CPU (jsonb's text output), which more at once would not speed
// up.
const PayloadReadsMax = 2

// payloadReads holds a token per big-payload read in flight in the process.
var payloadReads = make(chan struct{}, PayloadReadsMax)

// PayloadRead waits up to wait for one of the process's PayloadReadsMax
// big-payload reads, and returns the function that gives it back. When all
// stay taken it returns River's snooze (payloadSnooze), which retries the
// job without using an attempt, here or in another process; when ctx ends
// first, ctx's error.
func PayloadRead(ctx context.Context, wait time.Duration) (release func(), err error) {
	return acquireRead(ctx, payloadReads, wait)
}

func acquireRead(ctx context.Context, reads chan struct{}, wait time.Duration) (func(), error) {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case reads <- struct{}{}:
		return func() { <-reads }, nil
	case <-timer.C:
		return nil, river.JobSnooze(payloadSnooze)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// payloadSnooze is how long a job waits, without using an attempt, when
// PayloadReadsMax reads were in flight for half its budget.
const payloadSnooze = 2 * time.Second

// newResolvePayloads returns the hook for a client whose jobs may run for
// jobTimeout (-1: unbounded) and are rescued after rescueAfter.
func newResolvePayloads(jobTimeout, rescueAfter time.Duration) *resolvePayloads {
	margin := rescueAfter
	if jobTimeout > 0 {
		margin -= jobTimeout
	}
	return &resolvePayloads{budget: margin / 2, rescueAfter: rescueAfter, reads: payloadReads}
}

type skipPayloadsKey struct{}

// SkipPayloads returns a context in which a job's payload references are
// left as they are: for worker middleware of a worker that reads the events
// from the log itself.
func SkipPayloads(ctx context.Context) context.Context {
	return context.WithValue(ctx, skipPayloadsKey{}, true)
}

// payloadQuery reads the payloads of the events seqs names, with the event
// ids ids: the sequences found, and their data and metadata.
type payloadQuery func(ctx context.Context, seqs []int64, ids []uuid.UUID) (found []int64, data, metadata [][]byte, err error)

func (r *resolvePayloads) WorkBegin(ctx context.Context, job *rivertype.JobRow) error {
	if !bytes.Contains(job.EncodedArgs, payloadInLog) || ctx.Value(skipPayloadsKey{}) != nil {
		return nil
	}
	return r.resolve(ctx, job, func(ctx context.Context, seqs []int64, ids []uuid.UUID) (found []int64, data, metadata [][]byte, err error) {
		client, err := river.ClientFromContextSafely[pgx.Tx](ctx)
		if err != nil {
			return nil, nil, nil, err
		}
		exec := client.Driver().GetExecutor()
		// One statement per event, most often the only one of the job.
		for i, seq := range seqs {
			var d, m []byte
			switch err := exec.QueryRow(ctx, riversql.EventPayload, seq, ids[i]).Scan(&d, &m); {
			case errors.Is(err, pgx.ErrNoRows):
				continue
			case err != nil:
				return nil, nil, nil, err
			}
			found, data, metadata = append(found, seq), append(data, d), append(metadata, m)
		}
		return found, data, metadata, nil
	})
}

// resolve replaces job's args by the whole events, read with query within
// the budget.
func (r *resolvePayloads) resolve(jobCtx context.Context, job *rivertype.JobRow, query payloadQuery) error {
	ctx, cancel := context.WithTimeout(jobCtx, r.budget)
	defer cancel()
	release, err := acquireRead(jobCtx, r.reads, r.budget/2)
	if err != nil {
		return err
	}
	defer release()
	args, err := resolveArgs(ctx, job.EncodedArgs, query)
	if err != nil {
		if ctx.Err() != nil && jobCtx.Err() == nil {
			return fmt.Errorf("job %d: reading its big events' payloads from riverbus_event took over %s, the most a job may spend on it: "+
				"half the time River leaves a job beyond JobTimeout before it rescues it as stuck (RescueStuckJobsAfter %s); "+
				"raise RescueStuckJobsAfter, or find what slows the server: %w", job.ID, r.budget, r.rescueAfter, err)
		}
		return fmt.Errorf("job %d: %w", job.ID, err)
	}
	job.EncodedArgs = args
	return nil
}

// eventRef is what a reference names: the event, by its sequence and id.
type eventRef struct {
	GlobalSequence int64     `json:"global_sequence"`
	EventID        uuid.UUID `json:"event_id"`
	PayloadInLog   bool      `json:"payload_in_log"`
}

// resolveArgs returns args with every reference (the args themselves, or
// an element of their events) replaced by the whole envelope: the
// reference's fields, without payload_in_log, and the event's data and
// metadata as query reads them. Elements without a reference are kept
// byte for byte.
func resolveArgs(ctx context.Context, args []byte, query payloadQuery) ([]byte, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(args, &top); err != nil {
		return nil, fmt.Errorf("decode args to find payload references: %w", err)
	}
	var events []json.RawMessage
	group := false
	if raw, ok := top["events"]; ok && bytes.HasPrefix(bytes.TrimSpace(raw), []byte("[")) {
		if err := json.Unmarshal(raw, &events); err != nil {
			return nil, fmt.Errorf("decode the events of the args to find payload references: %w", err)
		}
		group = true
	} else {
		events = []json.RawMessage{args}
	}

	// The elements that are references, decoded, by index.
	refs := map[int]map[string]json.RawMessage{}
	var (
		seqs []int64
		ids  []uuid.UUID
	)
	for i, raw := range events {
		if !bytes.Contains(raw, payloadInLog) {
			continue
		}
		var ref eventRef
		if err := json.Unmarshal(raw, &ref); err != nil || !ref.PayloadInLog {
			continue
		}
		fields := top
		if group {
			fields = nil
			if err := json.Unmarshal(raw, &fields); err != nil {
				return nil, fmt.Errorf("decode event %d of the args: %w", ref.GlobalSequence, err)
			}
		}
		refs[i] = fields
		seqs = append(seqs, ref.GlobalSequence)
		ids = append(ids, ref.EventID)
	}
	if len(refs) == 0 {
		return args, nil
	}

	seqsFound, data, metadata, err := query(ctx, seqs, ids)
	if err != nil {
		return nil, fmt.Errorf("read the payloads of events %v from riverbus_event: %w", seqs, err)
	}
	type payload struct{ data, metadata json.RawMessage }
	found := make(map[int64]payload, len(seqsFound))
	for i, seq := range seqsFound {
		found[seq] = payload{data[i], metadata[i]}
	}
	var missing []int64
	for _, seq := range seqs {
		if _, ok := found[seq]; !ok {
			missing = append(missing, seq)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("it refers to the payload of events %v in riverbus_event, which no longer holds them (only the log keeps payloads over %d bytes)",
			missing, riversql.PayloadInlineMax)
	}

	for _, i := range slices.Sorted(maps.Keys(refs)) {
		fields := refs[i]
		var seq int64
		if err := json.Unmarshal(fields["global_sequence"], &seq); err != nil {
			return nil, err
		}
		p := found[seq]
		delete(fields, "payload_in_log")
		fields["data"], fields["metadata"] = p.data, p.metadata
		if !group {
			break
		}
		b, err := json.Marshal(fields)
		if err != nil {
			return nil, err
		}
		events[i] = b
	}
	if group {
		b, err := json.Marshal(events)
		if err != nil {
			return nil, err
		}
		top["events"] = b
	}
	return json.Marshal(top)
}
