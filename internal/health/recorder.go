// Package health records what a riverbus process fails at and reports it
// where other processes read it (docs/operations.md, docs/design.md §7).
//
// # Sections
//
// Recorder counts the failures of one process by operation (a horizon
// round, a pool's batch, River's completer, ...) in memory: how many,
// since when, the last message. Every failure also counts in the process's
// own metric ErrorsTotal, which needs no database.
//
// Handler is a slog.Handler that records the failures a process logs: a
// riverbus service marks the log line of a failure with Operation; River's
// services are known by the name they prefix their messages with. So
// whatever logs a failure reports it, with no second path to forget.
//
// Reporter writes the Recorder's failures, with the process's heartbeat and
// worker slots, to riverbus_process and riverbus_process_error (migration
// 021) at a bounded rate, where `riverbus status` and the metrics of any
// process read them. When the database refuses the write (a full disk),
// the rows stop changing and readers see the report is late.
package health

import (
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/riverbus/riverbus/internal/redact"
)

// Operations riverbus's own services report. River's are named by
// riverOperation.
const (
	OpHorizonRound      = "horizon round"
	OpHorizonNotify     = "horizon notification"
	OpListPools         = "list pools"
	OpPoolBatch         = "pool batch" // subject: the pool
	OpAnalyzeJobs       = "analyze river_job"
	OpCheckpointAdvance = "checkpoint advance"
	OpLaneSweep         = "ordered pools' sweep"
	OpRetireLate        = "late-event retirement"
	OpRetention         = "retention step"
	OpListen            = "listen"
	OpControlCheck      = "River control check"
	OpRetrySchedules    = "retry schedules read"
	OpReport            = "process report"
)

// AttrKey is the key of the log attribute that marks a log line as the
// failure of an operation; SubjectKeys are the keys whose value names what
// it failed for.
const AttrKey = "operation"

var subjectKeys = []string{"pool", "queue"}

// Operation is the log attribute that marks a Warn or Error line as the
// failure of op: Handler records it.
func Operation(op string) slog.Attr { return slog.String(AttrKey, op) }

// RecentWindow is how long an operation's failures stay recent: a failure
// within it of the last one continues the run (count, since); a run whose
// last failure is older is over and no longer reported.
const RecentWindow = 5 * time.Minute

// maxKeys bounds how many operations (with their subjects) a Recorder
// keeps, so a failure on every one of many pools costs a bounded report;
// the rest count under otherSubject.
const maxKeys = 100

const otherSubject = "(others)"

// maxMessage bounds the length of a failure's message kept.
const maxMessage = 1000

// ErrorsTotal counts the failures this process recorded, by operation and
// subject. It is the process's own (riverbus_process_errors_total), served
// without the database, so it still counts while the database refuses the
// report.
var ErrorsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
	Namespace: "riverbus", Name: "process_errors_total",
	Help: "Failures of this process by operation (a horizon round, a pool's batch, River's completer, ...) and subject (the pool or queue; empty when none).",
}, []string{"operation", "subject"})

// Key is an operation and what it failed for (a pool, a queue; "" when it
// concerns neither).
type Key struct {
	Operation string
	Subject   string
}

// Failure is a run of failures of one operation: Count failures, the first
// at Since, the last at Last with Message.
type Failure struct {
	Key
	Count   int64
	Since   time.Time
	Last    time.Time
	Message string
}

// Recorder counts a process's failures by operation. Its zero value is not
// usable: NewRecorder. It is safe for concurrent use.
type Recorder struct {
	mu     sync.Mutex
	runs   map[Key]*Failure
	now    func() time.Time
	newKey chan struct{} // a failure of a key not recorded before
}

// NewRecorder returns an empty Recorder.
func NewRecorder() *Recorder {
	return &Recorder{runs: map[Key]*Failure{}, now: time.Now, newKey: make(chan struct{}, 1)}
}

// Record counts a failure of op for subject ("" for none) with message
// (credentials of URLs masked here).
func (r *Recorder) Record(op, subject, message string) {
	message = truncate(redact.Text(message), maxMessage)
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	k := Key{op, subject}
	f := r.runs[k]
	if f == nil && len(r.runs) >= maxKeys {
		k.Subject = otherSubject
		f = r.runs[k]
	}
	ErrorsTotal.WithLabelValues(k.Operation, k.Subject).Inc()
	if f == nil || now.Sub(f.Last) > RecentWindow {
		if f == nil {
			select {
			case r.newKey <- struct{}{}:
			default:
			}
		}
		f = &Failure{Key: k, Since: now}
		r.runs[k] = f
	}
	f.Count++
	f.Last, f.Message = now, message
}

// Recent returns the runs of failures whose last failure is within
// RecentWindow, by operation and subject, and forgets the others.
func (r *Recorder) Recent() []Failure {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	var out []Failure
	for _, k := range slices.SortedFunc(maps.Keys(r.runs), cmpKey) {
		f := r.runs[k]
		if now.Sub(f.Last) > RecentWindow {
			delete(r.runs, k)
			continue
		}
		out = append(out, *f)
	}
	return out
}

// NewKey is signalled when an operation (or subject) fails that has no
// recent failure: a report soon after says so without waiting for the
// interval.
func (r *Recorder) NewKey() <-chan struct{} { return r.newKey }

func cmpKey(a, b Key) int {
	if c := strings.Compare(a.Operation, b.Operation); c != 0 {
		return c
	}
	return strings.Compare(a.Subject, b.Subject)
}

// truncate cuts s to at most n bytes, at a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
