package health

import (
	"context"
	"log/slog"
	"slices"
	"strings"
)

// NewHandler returns a slog.Handler that passes every record on to inner
// and records in rec the failures among them: a Warn or Error record that
// carries Operation (in the record or in attributes the logger was made
// with), its subject from a "pool" or "queue" attribute and its message
// from an "error" or "err" attribute (else the record's message).
//
// With river set the records are River's: River marks none, so an Error
// record (and the Warn records that say completions wait) is recorded
// under the operation its service's name tells (riverOperation).
func NewHandler(inner slog.Handler, rec *Recorder, river bool) slog.Handler {
	return &handler{inner: inner, rec: rec, river: river}
}

type handler struct {
	inner slog.Handler
	rec   *Recorder
	river bool
	// The logger's own attributes (With), outside any group: an operation
	// and subject set there apply to every record.
	op, subject, message string
	grouped              bool
}

// Enabled is true from Warn up whatever inner says, so a failure is
// recorded even when the operator's log level hides it.
func (h *handler) Enabled(ctx context.Context, level slog.Level) bool {
	return level >= slog.LevelWarn || h.inner.Enabled(ctx, level)
}

func (h *handler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		h.record(r)
	}
	if !h.inner.Enabled(ctx, r.Level) {
		return nil
	}
	return h.inner.Handle(ctx, r)
}

func (h *handler) record(r slog.Record) {
	op, subject, message := h.op, h.subject, h.message
	if !h.grouped {
		r.Attrs(func(a slog.Attr) bool {
			op, subject, message = scan(a, op, subject, message)
			return true
		})
	}
	if h.river && op == "" {
		op = riverOperation(r)
		// River's executor logs a failed hand-off of a failed job with
		// the job's own error: the line itself says what failed.
		if strings.Contains(r.Message, "and report error") || strings.Contains(r.Message, "report error for job") {
			message = r.Message
		}
	}
	if op == "" {
		return
	}
	if message == "" {
		message = r.Message
	}
	h.rec.Record(op, subject, message)
}

// scan picks what a attribute says about a failure.
func scan(a slog.Attr, op, subject, message string) (string, string, string) {
	switch {
	case a.Key == AttrKey:
		op = a.Value.String()
	case slices.Contains(subjectKeys, a.Key):
		subject = a.Value.String()
	case a.Key == "error" || a.Key == "err":
		message = a.Value.String()
	}
	return op, subject, message
}

func (h *handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	c.inner = h.inner.WithAttrs(attrs)
	if !h.grouped {
		for _, a := range attrs {
			c.op, c.subject, c.message = scan(a, c.op, c.subject, c.message)
		}
	}
	return &c
}

func (h *handler) WithGroup(name string) slog.Handler {
	c := *h
	c.inner = h.inner.WithGroup(name)
	c.grouped = c.grouped || name != ""
	return &c
}

// River's operations, as status and the metrics name them.
const (
	OpRiverComplete = "River complete"
	OpRiverFetch    = "River fetch"
	OpRiverWork     = "River work"
)

// riverOperation names the operation of a River log record, "" for one
// that is no failure. River's services prefix their messages with their
// name ("jobcompleter.BatchCompleter: Completer error (will retry after
// sleep)", "producer: Error fetching jobs").
func riverOperation(r slog.Record) string {
	service, msg, ok := strings.Cut(r.Message, ": ")
	if !ok {
		service = ""
		msg = r.Message
	}
	lower := strings.ToLower(msg)
	if r.Level < slog.LevelError {
		// River's warnings are mostly not failures (a job cancelled, a
		// notification dropped); these two say work is not being finished.
		switch {
		case strings.Contains(lower, "maximum backlog"):
			return OpRiverComplete
		case strings.Contains(lower, "appears to be stuck"):
			return OpRiverWork
		}
		return ""
	}
	pkg, name, dotted := strings.Cut(service, ".")
	if !dotted {
		pkg, name = "", service
	}
	switch {
	case strings.Contains(name, "Completer"):
		return OpRiverComplete
	case pkg == "jobexecutor" && (strings.Contains(lower, "complet") || strings.Contains(lower, "report error") ||
		strings.Contains(lower, "discard") || strings.Contains(lower, "cancel") || strings.Contains(lower, "snooz") ||
		strings.Contains(lower, "available")):
		// The executor hands each job's end to the completer; this is
		// that hand-off failing.
		return OpRiverComplete
	case pkg == "jobexecutor":
		return OpRiverWork
	case name == "producer" && strings.Contains(lower, "fetching jobs"):
		return OpRiverFetch
	case pkg == "notifier":
		return "River listen"
	case pkg == "leadership":
		return "River leader election"
	case name == "":
		return "River"
	default:
		// maintenance.JobRescuer -> "River JobRescuer", producer -> "River producer".
		return "River " + name
	}
}
