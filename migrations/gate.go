package migrations

import (
	"cmp"
	"context"
	"sync"
)

// Gate is what the delivering parts of one process share (the fan-out's
// horizon rounds and pool batches, retention, River's fetching, the UI), so
// that all of them stop once the schema needs newer code than theirs: a
// rolling upgrade migrated the database under the process (docs/design.md
// §10). It holds the schema version their code knows, the parameter of
// SQLSchemaCheck, and whether they stopped. The part that meets the
// refusal stops it (Stop); whoever runs the parts stops them all when it
// does (Stopped, Context) and says why (Err). A riverbus.Client makes one
// for its parts; a fan-out run on its own (fanout.Config.Gate) takes one to
// share, or makes its own. Its methods are safe for concurrent use.
type Gate struct {
	code    int
	once    sync.Once
	stopped chan struct{}
	err     *SchemaTooNewError
}

// NewGate returns an open Gate for code that knows schema version code;
// zero means Newest(), this build's.
func NewGate(code int) *Gate {
	return &Gate{code: cmp.Or(code, Newest()), stopped: make(chan struct{})}
}

// Code is the schema version the gate's code knows: the parameter of
// SQLSchemaCheck.
func (g *Gate) Code() int { return g.code }

// Stop stops the gate when err says the schema needs newer code (a
// *SchemaTooNewError, or the check's SQLSTATE) and reports whether it did;
// other errors leave it open. The first such error is the one Err returns.
func (g *Gate) Stop(err error) bool {
	tooNew := AsSchemaTooNew(err)
	if tooNew == nil {
		return false
	}
	g.once.Do(func() {
		g.err = tooNew
		close(g.stopped)
	})
	return true
}

// Stopped returns a channel closed when the gate stops.
func (g *Gate) Stopped() <-chan struct{} { return g.stopped }

// Err returns the *SchemaTooNewError that stopped the gate, or nil while it
// is open.
func (g *Gate) Err() error {
	select {
	case <-g.stopped:
		return g.err
	default:
		return nil
	}
}

// Context returns a context cancelled when ctx ends or the gate stops: a
// process runs its delivering parts under it.
func (g *Gate) Context(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-g.stopped:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}
