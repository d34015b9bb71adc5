package lanes

import (
	"bytes"
	"context"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
)

// Handoff is River worker middleware for ordered pools. When a job of
// an ordered pool (one whose metadata names a lane) succeeds, it completes
// the job at once in a transaction of its own, and the database trigger
// hands the lane to the next job in that same transaction. Without it the
// hand-off waits for River's batched completer, which records completions
// about 100 ms later, and a key's events would run at a few per second.
// River's completer then finds the job completed already and leaves it.
//
// The extra transaction per job pays off only while a process works a
// single lane job at a time (a globally ordered pool, one busy key):
// latency is what matters then. As soon as a second lane job is in flight
// in this process it leaves completion to River's batched completer, whose
// one statement per batch releases every finished lane at once (migration
// 005). In the ordered-vs-unordered bench's drain (200 keys) that limit
// gave 1.5k jobs/s, against 843 with a limit of 8 and 639 with 32; with no
// immediate completion at all a single key would wait for River's
// completer at every hand-off.
//
// riverclient.Config installs it. Jobs of unordered pools pass through untouched.
type Handoff struct {
	river.MiddlewareDefaults
	inFlight atomic.Int64
}

// handoffBusy is how many lane jobs may be in flight in one process for
// Handoff to complete one itself; above it, River's batched completer
// does.
const handoffBusy = 1

type handoffArgs struct{}

func (handoffArgs) Kind() string { return "" }

// Work runs the job and, for a lane job that succeeded, completes it now.
func (m *Handoff) Work(ctx context.Context, job *rivertype.JobRow, doInner func(context.Context) error) error {
	if !hasLane(job.Metadata) {
		return doInner(ctx)
	}
	busy := m.inFlight.Add(1) > handoffBusy
	defer m.inFlight.Add(-1)
	if err := doInner(ctx); err != nil || busy {
		return err
	}
	client, err := river.ClientFromContextSafely[pgx.Tx](ctx)
	if err != nil {
		return nil // not under a River client: River completes it as usual
	}
	drv := client.Driver()
	execTx, err := drv.GetExecutor().Begin(ctx)
	if err != nil {
		return nil // River's completer completes it a little later
	}
	tx := drv.UnwrapTx(execTx)
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck
	if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, &river.Job[handoffArgs]{JobRow: job}); err != nil {
		return nil
	}
	_ = tx.Commit(ctx)
	return nil
}

// hasLane reports whether job metadata names an ordering lane (a cheap text
// test: the key appears in the JSON only as the lane's key).
func hasLane(metadata []byte) bool { return bytes.Contains(metadata, []byte(`"`+MetadataKey+`"`)) }
