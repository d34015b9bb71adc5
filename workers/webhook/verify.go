package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/rivertype"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/outbox"
	"github.com/riverbus/riverbus/workers"
)

// A job row is not evidence: any riverbus_worker login may insert or
// change one, in any queue, with any args. So a delivery sends what
// riverbus_event holds for the sequences the job names, and only when the
// job is one the fan-out could have made for this pool: in the pool's
// queue, of events the log holds and the pool's filter matches, with args
// equal to the log's envelope. Anything else is refused: not sent, and a
// dead letter at once, with the reason as its error (docs/security.md,
// "Who may do what").

// claim is what a job's args say: one event (workers.Args) or a
// transaction group's events, or part of them (workers.GroupArgs).
type claim struct {
	group  bool
	events []claimedEvent
	// Of a group: the rest of workers.GroupArgs.
	sequence      int64
	transactionID string
	key           string
	part, parts   int
	late          bool
}

// claimedEvent is one event of a claim: its envelope as the job has it,
// and the fields compared in Go.
type claimedEvent struct {
	raw            json.RawMessage
	GlobalSequence int64     `json:"global_sequence"`
	EventID        uuid.UUID `json:"event_id"`
	OccurredAt     time.Time `json:"occurred_at"`
}

// parseClaim reads a job's args.
func parseClaim(args []byte) (*claim, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(args, &fields); err != nil {
		return nil, err
	}
	c := &claim{}
	if late, ok := fields["late"]; ok {
		if err := json.Unmarshal(late, &c.late); err != nil {
			return nil, fmt.Errorf("late: %w", err)
		}
	}
	var raws []json.RawMessage
	if events, ok := fields["events"]; ok {
		var g workers.GroupArgs
		var gr struct {
			Events []json.RawMessage `json:"events"`
		}
		if err := json.Unmarshal(args, &gr); err != nil {
			return nil, err
		}
		// The events are compared raw; the rest of the group is decoded
		// without them.
		delete(fields, "events")
		rest, _ := json.Marshal(fields) // re-encoding what was decoded cannot fail
		if err := json.Unmarshal(rest, &g); err != nil {
			return nil, err
		}
		if len(gr.Events) == 0 || !bytes.HasPrefix(bytes.TrimSpace(events), []byte("[")) {
			return nil, errors.New("a group with no events")
		}
		c.group, raws = true, gr.Events
		c.sequence, c.transactionID, c.key, c.part, c.parts = g.GlobalSequence, g.TransactionID, g.Key, g.Part, g.Parts
	} else {
		delete(fields, "late")
		one, _ := json.Marshal(fields)
		raws = []json.RawMessage{one}
	}
	for _, raw := range raws {
		e := claimedEvent{raw: raw}
		if err := json.Unmarshal(raw, &e); err != nil {
			return nil, err
		}
		if e.EventID == uuid.Nil || e.GlobalSequence <= 0 || e.OccurredAt.IsZero() {
			return nil, errors.New("an event without global_sequence, event_id or occurred_at")
		}
		c.events = append(c.events, e)
	}
	return c, nil
}

// logEvents is what the log and the pool hold for a claim (sqlLogEvents).
type logEvents struct {
	poolFound              bool
	queue, grouping, order *string
	found, matches         []bool
	types, keys, txids     []*string
	occurredAt             []*time.Time
	differs                []string
	envelopes              []json.RawMessage // each as PostgreSQL's jsonb output writes it
}

// refusal is a job the worker refuses to deliver: its error, and why.
type refusal struct{ reason string }

func (r *refusal) Error() string { return r.reason }

// fromLog checks the job against the log and the pool, and returns the
// request's body (the log's envelope, with the job's late flag and group
// fields) and the event id to send it under. A job that fails a check
// gives a *refusal naming it; a database error is returned as it is, and
// the job retried.
func (w *worker) fromLog(ctx context.Context, job *river.Job[poolArgs]) ([]byte, uuid.UUID, error) {
	refuse := func(format string, args ...any) ([]byte, uuid.UUID, error) {
		return nil, uuid.Nil, &refusal{fmt.Sprintf(format, args...)}
	}
	c, err := parseClaim(job.EncodedArgs)
	if err != nil {
		return refuse("its args are not a riverbus event envelope (%v)", err)
	}
	client, err := river.ClientFromContextSafely[pgx.Tx](ctx)
	if err != nil {
		return nil, uuid.Nil, fmt.Errorf("webhook of pool %q needs the River client (pgx) in the job's context to read the event from riverbus_event: %w", w.pool, err)
	}
	seqs := make([]int64, len(c.events))
	raws := make([]string, len(c.events))
	for i, e := range c.events {
		seqs[i], raws[i] = e.GlobalSequence, string(e.raw)
	}
	if bytes.Contains(job.EncodedArgs, []byte(`"payload_in_log"`)) {
		// The envelope of a big event is rebuilt from the log: one of the
		// process's few big reads at once (workers.PayloadRead), so
		// the deliveries' memory does not follow --concurrency. Waiting
		// for one takes at most the delivery's own Timeout (without one,
		// half of what is left of the job's time).
		wait := w.timeout
		if wait <= 0 {
			wait = TimeoutDefault
			if deadline, ok := ctx.Deadline(); ok {
				wait = time.Until(deadline) / 2
			}
		}
		release, err := workers.PayloadRead(ctx, wait)
		if err != nil {
			return nil, uuid.Nil, err
		}
		defer release()
	}
	var l logEvents
	if err := client.Driver().GetExecutor().QueryRow(ctx, sqlLogEvents, w.pool, seqs, raws).Scan(
		&l.poolFound, &l.queue, &l.grouping, &l.order, &l.found, &l.matches, &l.types, &l.keys, &l.txids,
		&l.occurredAt, &l.differs, &l.envelopes); err != nil {
		return nil, uuid.Nil, fmt.Errorf("read events %v of the job from riverbus_event: %w", seqs, err)
	}

	switch {
	case !l.poolFound:
		return refuse("pool %s does not exist", w.pool)
	case *l.queue != job.Queue:
		return refuse("it is in queue %s, not in pool %s's queue %s", job.Queue, w.pool, *l.queue)
	case c.group && *l.grouping != string(bustype.GroupTransaction):
		return refuse("it holds a transaction group, and pool %s is not grouped", w.pool)
	case !c.group && *l.grouping != string(bustype.GroupNone):
		return refuse("it holds one event, and pool %s groups events by transaction", w.pool)
	}
	for i, e := range c.events {
		switch {
		case i > 0 && e.GlobalSequence <= c.events[i-1].GlobalSequence:
			return refuse("its events are not in sequence order")
		case !l.found[i]:
			return refuse("no event %d in riverbus_event (made up, or deleted by retention, which keeps every event a pool's unfinished job needs)", e.GlobalSequence)
		case !l.matches[i]:
			return refuse("event %d (type %q) does not match the filter of pool %s", e.GlobalSequence, *l.types[i], w.pool)
		case l.differs[i] != "" || !e.OccurredAt.Equal(*l.occurredAt[i]):
			differs := l.differs[i]
			if !e.OccurredAt.Equal(*l.occurredAt[i]) {
				differs = strings.TrimPrefix(differs+", occurred_at", ", ")
			}
			return refuse("its args differ from event %d as riverbus_event holds it (%s)", e.GlobalSequence, differs)
		case c.group && *l.txids[i] != c.transactionID:
			return refuse("event %d is not of transaction %s", e.GlobalSequence, c.transactionID)
		case c.group && *l.order == string(bustype.OrderingKey) && *l.keys[i] != c.key:
			return refuse("event %d's key is not the group's %q", e.GlobalSequence, c.key)
		}
	}
	if err := w.upcast(ctx, l.envelopes); err != nil {
		return nil, uuid.Nil, err
	}
	if !c.group {
		body := l.envelopes[0]
		if c.late {
			// A jsonb object's text ends with its closing brace.
			body = append(body[:len(body)-1], `, "late": true}`...)
		}
		return body, c.events[0].EventID, nil
	}
	if c.sequence != c.events[0].GlobalSequence || c.part < 1 || c.part > c.parts {
		return refuse("its group fields are not those of a group's part (global_sequence %d, part %d of %d)", c.sequence, c.part, c.parts)
	}
	var events []byte
	for i, env := range l.envelopes {
		if i > 0 {
			events = append(events, ',')
		}
		events = append(events, env...)
	}
	g := workers.GroupArgs{GlobalSequence: c.sequence, TransactionID: c.transactionID, Key: c.key, Late: c.late, Part: c.part, Parts: c.parts}
	return g.AppendJSON(nil, events), c.events[0].EventID, nil
}

// deadLetter discards the running job at once with reason as its error,
// through River's own statement (the one its completer runs), so that the
// dead-letter and lane triggers see what they see when River discards a
// job after its last attempt. Retrying the job would find the same: it is
// not delivered, and not completed, so an operator sees it. When the
// statement fails the job stays running, and River records the error the
// worker returns and retries it, to be refused again.
func deadLetter(ctx context.Context, job *river.Job[poolArgs], reason string) {
	client, err := river.ClientFromContextSafely[pgx.Tx](ctx)
	if err != nil {
		return
	}
	now := time.Now().UTC()
	errData, err := json.Marshal(rivertype.AttemptError{At: now, Attempt: job.Attempt, Error: reason})
	if err != nil {
		return
	}
	one := riverdriver.JobSetStateDiscarded(job.ID, now, errData, nil)
	_, _ = client.Pilot().JobSetStateIfRunningMany(ctx, client.Driver().GetExecutor(), &riverdriver.JobSetStateIfRunningManyParams{
		ID:              []int64{one.ID},
		Attempt:         []*int{one.Attempt},
		ErrData:         [][]byte{one.ErrData},
		FinalizedAt:     []*time.Time{one.FinalizedAt},
		MetadataDoMerge: []bool{one.MetadataDoMerge},
		MetadataUpdates: [][]byte{one.MetadataUpdates},
		ScheduledAt:     []*time.Time{one.ScheduledAt},
		State:           []rivertype.JobState{one.State},
	})
}

// upcast brings each of the log's envelopes to the version of its type
// that the worker's registry knows (workers.Registry.UpcastEvent), in
// place: the envelope's data and version are replaced, the rest kept. An
// envelope already at that version, or of a type the registry has no
// version for, is kept byte for byte. A failure is the
// *workers.UpcastError: the job is retried, and ends a dead letter with
// it as its reason.
func (w *worker) upcast(ctx context.Context, envelopes []json.RawMessage) error {
	if w.versions == nil {
		return nil
	}
	for i, env := range envelopes {
		var head struct {
			Type    string `json:"type"`
			Version int    `json:"version"`
		}
		if err := json.Unmarshal(env, &head); err != nil {
			return fmt.Errorf("decode the log's envelope: %w", err)
		}
		if v, ok := w.versions.VersionOf(head.Type); !ok || v == head.Version {
			continue
		}
		var fields map[string]json.RawMessage
		var e outbox.Event
		if err := json.Unmarshal(env, &fields); err != nil {
			return fmt.Errorf("decode the log's envelope: %w", err)
		}
		if err := json.Unmarshal(env, &e); err != nil {
			return fmt.Errorf("decode the log's envelope: %w", err)
		}
		if err := w.versions.UpcastEvent(ctx, &e); err != nil {
			return err
		}
		fields["data"], fields["version"] = e.Data, json.RawMessage(strconv.Itoa(e.Version))
		b, err := json.Marshal(fields)
		if err != nil {
			return fmt.Errorf("encode the upcast envelope of event %d: %w", e.GlobalSequence, err)
		}
		envelopes[i] = b
	}
	return nil
}
