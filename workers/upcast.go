package workers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/riverbus/riverbus/outbox"
)

// Upcaster turns the data of an event of one version of its type into the
// data of the next version. It gets the job's context and the data as the
// previous step left it (the stored data, for the first step), and returns
// the new data, which must be valid JSON. It must not keep or change data:
// the stored event is never rewritten.
type Upcaster func(ctx context.Context, data json.RawMessage) (json.RawMessage, error)

// ErrVersionTooNew is matched (errors.Is) by the *UpcastError of an event
// whose version is newer than the version of its type that the registry's
// handlers know: an appender runs a newer build than this worker. The job
// is retried on its pool's schedule, so that a worker that knows the
// version (a newer one, deployed meanwhile) can take it; if none does
// before its last attempt, it ends a dead letter with this reason.
var ErrVersionTooNew = errors.New("newer than the version its handlers know")

// ErrNoUpcaster is matched by the *UpcastError of an event whose version
// the registry has no upcaster from (an event older than the first
// upcaster of its type).
var ErrNoUpcaster = errors.New("no upcaster")

// UpcastError is the error of an event that could not be brought to the
// version of its type that the registry's handlers know: its upcaster
// failed (returned an error, panicked, or returned data that is not JSON),
// it is missing (ErrNoUpcaster), or the event is newer than that version
// (ErrVersionTooNew). Like a DecodeError it is an ordinary error: River
// retries the job on its pool's schedule and, after its last attempt,
// discards it, which makes it a dead letter whose reason is this error;
// the event is never skipped, and its stored data and version stay as the
// appender wrote them.
type UpcastError struct {
	// GlobalSequence, EventID and EventType identify the event.
	GlobalSequence int64
	EventID        uuid.UUID
	EventType      string
	// Stored is the event's version as stored; Target the version its
	// handlers know.
	Stored, Target int
	// From is the version of the step that failed (its upcaster turns
	// From into From+1); for ErrVersionTooNew, Stored.
	From int
	// Err is the upcaster's error, or what was wrong.
	Err error
}

func (e *UpcastError) Error() string {
	if errors.Is(e.Err, ErrVersionTooNew) {
		return fmt.Sprintf("upcast event %d (%s): version %d is %v (%d): deploy workers that know version %d (an upcaster to it, or EventVersion), "+
			"which take the job on one of its retries; after its last attempt it is kept as a dead letter",
			e.GlobalSequence, e.EventType, e.Stored, e.Err, e.Target, e.Stored)
	}
	return fmt.Sprintf("upcast event %d (%s) from version %d to %d (stored as version %d, handlers know %d): %v",
		e.GlobalSequence, e.EventType, e.From, e.From+1, e.Stored, e.Target, e.Err)
}

func (e *UpcastError) Unwrap() error { return e.Err }

// eventVersions is what a registry knows of one event type's versions.
type eventVersions struct {
	steps    map[int]Upcaster // from → the upcaster to from+1
	declared int              // EventVersion's, 0 when not declared
}

// target returns the version handlers know: the declared one, else the
// highest the chain reaches.
func (v *eventVersions) target() int {
	if v.declared != 0 {
		return v.declared
	}
	return slices.Max(slices.Collect(maps.Keys(v.steps))) + 1
}

// versionsOf returns the versions of eventType, made on first use.
func (reg *Registry) versionsOf(eventType string) *eventVersions {
	if reg.versions == nil {
		reg.versions = map[string]*eventVersions{}
	}
	v, ok := reg.versions[eventType]
	if !ok {
		v = &eventVersions{steps: map[int]Upcaster{}}
		reg.versions[eventType] = v
	}
	return v
}

// Upcast registers up as the upcaster of events of type eventType from
// version from to version from+1; upcasters from 1 and from 2 make a chain
// that brings version-1 and version-2 events to version 3. Unless
// EventVersion says otherwise, the version handlers know of the type is the
// highest its chain reaches, and every event of the type is brought to it,
// step by step, before its handler runs (Event.Version then says that
// version; the stored event is not changed). Webhook deliveries bound to
// the registry (webhook.Bind) are upcast the same way. Register every
// upcaster before the Client starts.
//
// It panics when eventType is empty, from is not between 1 and
// outbox.VersionMax-1, up is nil, or the type already has an upcaster from
// that version, as Add panics on a bad binding; UpcastSafely returns an
// error instead. A chain with a gap is refused by CheckVersions, which the
// Client's Start runs.
func (reg *Registry) Upcast(eventType string, from int, up Upcaster) {
	if err := reg.UpcastSafely(eventType, from, up); err != nil {
		panic(err)
	}
}

// UpcastSafely is Upcast returning an error instead of panicking.
func (reg *Registry) UpcastSafely(eventType string, from int, up Upcaster) error {
	switch {
	case reg == nil:
		return errors.New("riverbus: Registry is nil: make it with workers.NewRegistry")
	case eventType == "":
		return errors.New("riverbus: upcaster: the event type must not be empty")
	case from < 1 || from >= outbox.VersionMax:
		return fmt.Errorf("riverbus: upcaster of %q: from must be a version between 1 and %d, got %d", eventType, outbox.VersionMax-1, from)
	case up == nil:
		return fmt.Errorf("riverbus: upcaster of %q from version %d is nil", eventType, from)
	}
	v := reg.versionsOf(eventType)
	if _, dup := v.steps[from]; dup {
		return fmt.Errorf("riverbus: %q already has an upcaster from version %d to %d", eventType, from, from+1)
	}
	v.steps[from] = up
	return nil
}

// EventVersion declares the version of eventType that the registry's
// handlers know, when it is not the highest its upcasters reach: a type
// without upcasters yet (version 1, say), so that an event of a newer
// version is refused rather than handed to a handler that cannot read it;
// or a chain registered ahead of the handlers that will read its top. An
// event newer than the version handlers know fails its job with an
// UpcastError matching ErrVersionTooNew. Events of a type the registry has
// no version for reach their handler as stored.
//
// It panics when eventType is empty, version is not between 1 and
// outbox.VersionMax, or the type's version was already declared.
func (reg *Registry) EventVersion(eventType string, version int) {
	if err := reg.EventVersionSafely(eventType, version); err != nil {
		panic(err)
	}
}

// EventVersionSafely is EventVersion returning an error instead of
// panicking.
func (reg *Registry) EventVersionSafely(eventType string, version int) error {
	switch {
	case reg == nil:
		return errors.New("riverbus: Registry is nil: make it with workers.NewRegistry")
	case eventType == "":
		return errors.New("riverbus: event version: the event type must not be empty")
	case version < 1 || version > outbox.VersionMax:
		return fmt.Errorf("riverbus: event version of %q must be between 1 and %d, got %d", eventType, outbox.VersionMax, version)
	}
	v := reg.versionsOf(eventType)
	if v.declared != 0 {
		return fmt.Errorf("riverbus: the version of %q is already declared (%d)", eventType, v.declared)
	}
	v.declared = version
	return nil
}

// CheckVersions reports a type whose upcasters do not make one chain up to
// the version its handlers know: a missing step between its lowest
// upcaster and that version, or an upcaster from that version or above.
// The Client's Start runs it; an application with a River client of its
// own runs it before starting it.
func (reg *Registry) CheckVersions() error {
	if reg == nil {
		return nil
	}
	var problems []string
	for _, eventType := range slices.Sorted(maps.Keys(reg.versions)) {
		v := reg.versions[eventType]
		if len(v.steps) == 0 {
			continue
		}
		froms := slices.Sorted(maps.Keys(v.steps))
		target := v.target()
		var missing []string
		for from := froms[0]; from < target; from++ {
			if _, ok := v.steps[from]; !ok {
				missing = append(missing, fmt.Sprintf("%d to %d", from, from+1))
			}
		}
		if len(missing) > 0 {
			problems = append(problems, fmt.Sprintf("%q has no upcaster from %s: its chain from version %d must reach version %d, the version its handlers know",
				eventType, strings.Join(missing, ", "), froms[0], target))
		}
		if last := froms[len(froms)-1]; last >= target {
			problems = append(problems, fmt.Sprintf("%q has an upcaster from version %d, but its handlers know version %d (EventVersion): raise the declared version, or remove the upcaster",
				eventType, last, target))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("riverbus: event versions: %s", strings.Join(problems, "; "))
	}
	return nil
}

// VersionOf returns the version of eventType that the registry's handlers
// know (EventVersion's, or the highest its upcasters reach), and false
// when the registry has no version for the type: its events reach their
// handlers as stored.
func (reg *Registry) VersionOf(eventType string) (int, bool) {
	if reg == nil {
		return 0, false
	}
	v, ok := reg.versions[eventType]
	if !ok {
		return 0, false
	}
	return v.target(), true
}

// needsUpcast reports whether e must change before a handler sees it: it
// has no version (an envelope from before versions: version 1), or its
// type has a version handlers know and e is of another.
func (reg *Registry) needsUpcast(e *outbox.Event) bool {
	if e.Version == 0 {
		return true
	}
	v, ok := reg.versions[e.Type]
	return ok && e.Version != v.target()
}

// UpcastEvent brings e to the version of its type that the registry's
// handlers know, running the type's upcasters one step at a time from
// e.Version, and sets e.Data and e.Version to the result; a version of 0
// (an envelope written before events had versions) is version 1. An event
// of a type the registry has no version for is left as it is. The error is
// an *UpcastError, and e is unchanged then. Pool jobs whose args embed Args
// or GroupArgs get this before their handler runs, and webhook deliveries
// before they are sent; an application reading events itself
// (outbox.Read) calls it to see them as its handlers do.
func (reg *Registry) UpcastEvent(ctx context.Context, e *outbox.Event) error {
	stored := max(e.Version, 1)
	v, ok := reg.versions[e.Type]
	if !ok {
		e.Version = stored
		return nil
	}
	target := v.target()
	fail := func(from int, err error) error {
		return &UpcastError{GlobalSequence: e.GlobalSequence, EventID: e.EventID, EventType: e.Type,
			Stored: stored, Target: target, From: from, Err: err}
	}
	if stored > target {
		return fail(stored, ErrVersionTooNew)
	}
	data := e.Data
	for from := stored; from < target; from++ {
		up, ok := v.steps[from]
		if !ok {
			return fail(from, fmt.Errorf("%w from version %d of %q is registered", ErrNoUpcaster, from, e.Type))
		}
		next, err := runUpcaster(ctx, up, data)
		if err != nil {
			return fail(from, err)
		}
		data = next
	}
	e.Data, e.Version = data, target
	return nil
}

// runUpcaster runs up on data, turning a panic into an error and refusing
// output that is not JSON.
func runUpcaster(ctx context.Context, up Upcaster, data json.RawMessage) (out json.RawMessage, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, fmt.Errorf("upcaster panicked: %v", r)
		}
	}()
	// A copy: an upcaster that changed its input in place would change
	// the job's args, which River keeps for the next attempt.
	out, err = up(ctx, append(json.RawMessage(nil), data...))
	if err != nil {
		return nil, err
	}
	if !json.Valid(out) {
		return nil, fmt.Errorf("upcaster returned data that is not valid JSON: %.100q", out)
	}
	return out, nil
}

// carrier is a handler's args that carry events: *Args and *GroupArgs, and
// so any args type that embeds one of them (a pointer-receiver method of
// an embedded field is promoted to the outer type's pointer).
type carrier interface {
	// carriedEvents returns pointers to the args' events. With own, a
	// group's events are copied first, so that changing them leaves the
	// args they were copied from as they were.
	carriedEvents(own bool) []*outbox.Event
}

func (a *Args) carriedEvents(bool) []*outbox.Event { return []*outbox.Event{&a.Event} }

func (j *GroupArgs) carriedEvents(own bool) []*outbox.Event {
	if own {
		j.Events = slices.Clone(j.Events)
	}
	events := make([]*outbox.Event, len(j.Events))
	for i := range j.Events {
		events[i] = &j.Events[i]
	}
	return events
}

// upcasting is a handler as a Registry gives it to River: before the
// handler's Work, the job's events are upcast (UpcastEvent), in a copy of
// its args. River's job, its encoded args and the stored event stay as
// they were: River UI and `riverbus dlq show` show the event as appended.
// Args that carry no events (a webhook's) go to the handler unchanged.
type upcasting[T river.JobArgs] struct {
	worker river.Worker[T]
	reg    *Registry
}

func (w *upcasting[T]) Middleware(job *rivertype.JobRow) []rivertype.WorkerMiddleware {
	return w.worker.Middleware(job)
}

func (w *upcasting[T]) NextRetry(job *river.Job[T]) time.Time { return w.worker.NextRetry(job) }

func (w *upcasting[T]) Timeout(job *river.Job[T]) time.Duration { return w.worker.Timeout(job) }

func (w *upcasting[T]) Work(ctx context.Context, job *river.Job[T]) error {
	c, ok := any(&job.Args).(carrier)
	if !ok || !slices.ContainsFunc(c.carriedEvents(false), w.reg.needsUpcast) {
		return w.worker.Work(ctx, job)
	}
	args := job.Args
	for _, e := range any(&args).(carrier).carriedEvents(true) {
		if err := w.reg.UpcastEvent(ctx, e); err != nil {
			return err
		}
	}
	up := *job
	up.Args = args
	return w.worker.Work(ctx, &up)
}
