package fanout

import (
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/riverbus/riverbus/migrations"
)

// The defaults of Config's fields, each named by its field's doc.
const (
	// GapTimeoutDefault is the default of Config.GapTimeout.
	GapTimeoutDefault = 5 * time.Second
	// GapCheckIntervalDefault is the default of Config.GapCheckInterval.
	GapCheckIntervalDefault = 10 * time.Millisecond
	// PollIntervalDefault is the default of Config.PollInterval.
	PollIntervalDefault = time.Second
	// BatchSizeDefault is the default of Config.BatchSize.
	BatchSizeDefault = 1000
	// BatchBytesDefault is the default of Config.BatchBytes.
	BatchBytesDefault = 64 << 20
	// WorkersDefault is the default of Config.Workers.
	WorkersDefault = 4
	// MarkIntervalDefault is the default of Config.MarkInterval: a rewind
	// to a time re-delivers, besides every event committed after it, those
	// committed in about this long before it; and the marks it costs are
	// at most one per interval while events arrive, some 6.3 million a
	// year (docs/design.md §11).
	MarkIntervalDefault = 5 * time.Second
)

// Config configures the fan-out that a riverbus.Client runs (its
// Config.Fanout). Zero fields take their defaults.
type Config struct {
	// GapTimeout is how long the horizon waits at a missing sequence that it
	// cannot prove rolled back before skipping it (it is then watched, and
	// delivered late if it commits). Default GapTimeoutDefault.
	GapTimeout time.Duration
	// GapCheckInterval is how often the horizon looks again while a gap is
	// open: a rolled-back gap costs about this much. Default
	// GapCheckIntervalDefault.
	GapCheckInterval time.Duration
	// PollInterval bounds how long a lost notification can delay delivery.
	// Default PollIntervalDefault.
	PollInterval time.Duration
	// BatchSize is the most events one pool transaction turns into jobs.
	// Default BatchSizeDefault.
	BatchSize int
	// BatchBytes bounds the events one pool transaction turns into jobs by
	// their size as stored (compressed where PostgreSQL compressed them):
	// a batch stops before the event that would take it past BatchBytes,
	// but always takes at least one, so an event bigger than BatchBytes is
	// a batch of its own. The events' payload never enters the fan-out's
	// memory either way (the database builds the jobs' args); BatchBytes
	// bounds what one transaction reads and writes. Default
	// BatchBytesDefault.
	BatchBytes int
	// Workers is how many pools this instance fans out at the same time.
	// Default WorkersDefault.
	Workers int
	// MarkInterval is how often, at most, the horizon records when events
	// committed by (a mark), for resets of a pool to a time
	// (riverbus.Client.PoolResetToTime): such a reset re-delivers the
	// events committed in up to about this long before the time too.
	// Default MarkIntervalDefault; tests shorten it.
	MarkInterval time.Duration
	// Logger receives logs. Default: slog.Default().
	Logger *slog.Logger
	// OnBatch, when set, is called after each committed pool batch. Tests
	// and metrics use it.
	OnBatch func(BatchResult)
	// TracerProvider, when set, gives the fan-out's rounds and batches
	// spans of their own (riverbus.fanout.round, riverbus.fanout.batch),
	// each batch's linked to the append spans of the events it fanned out.
	// Nil: no spans. Either way each job carries its event's trace context
	// in its metadata, so a handler continues the append's trace.
	TracerProvider trace.TracerProvider
	// Gate is what the fan-out's rounds and batches check the schema's
	// version against (each runs migrations.SQLSchemaCheck first) and
	// stop, with the rest of the process, once the schema needs newer code
	// than the gate's: a rolling upgrade migrated the database. A process
	// that runs other delivering parts beside the fan-out gives them all
	// one gate; a riverbus.Client sets its own here, whatever the field
	// held. Default: nil, a gate of its own for this build's schema
	// (migrations.NewGate(0)).
	Gate *migrations.Gate
}

// BatchResult describes one committed pool batch.
type BatchResult struct {
	Pool   string
	Jobs   int   // jobs inserted (late ones included)
	Late   int   // late events delivered
	Cursor int64 // cursor after the batch
	// Undeliverable counts the jobs (of Jobs) that could not be built or
	// inserted and became dead letters at once.
	Undeliverable int
}
