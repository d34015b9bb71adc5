package riverbustest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/riverbus/riverbus"
	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/internal/pgtest"
	"github.com/riverbus/riverbus/internal/pools"
)

// EnvURL names the environment variable that points the tests at an
// existing PostgreSQL server instead of a throwaway one. Its user must be
// allowed to create databases; the databases the tests create are dropped
// when the test binary ends.
const EnvURL = "RIVERBUS_TEST_DATABASE_URL"

// TB is what the helpers need of a test. testing.TB has it; so can an
// Example, with a Fatalf that panics and cleanups it runs at its end.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Cleanup(f func())
}

// Main runs the package's tests against a real PostgreSQL and exits: call it
// from TestMain. It uses a throwaway server that every test binary of the
// module run by the same user shares (so `go test ./...` starts one, not
// one per package), starting it when none runs, or the server at EnvURL.
// It migrates a template database once per schema, and drops the
// databases its tests created when they end, also on SIGINT or SIGTERM;
// the throwaway server stops as soon as no test binary or go test run uses
// it.
//
// The throwaway server needs PostgreSQL's server binaries (initdb and
// postgres: `pg_config --bindir`, PATH or /usr/lib/postgresql/*/bin). Run as
// root, it runs the server as the "postgres" operating system user, since
// PostgreSQL refuses to run as root.
//
//	func TestMain(m *testing.M) { riverbustest.Main(m) }
func Main(m *testing.M) { pgtest.Main(m) }

// Run is Main without the exit, for a TestMain that has more to do after
// the tests: it returns the exit code.
func Run(m *testing.M) int { return pgtest.Run(m) }

// NewDatabase creates a fresh database with the riverbus schema (every
// migration applied) and returns a pool connected to it. Creating one takes
// tens of milliseconds on an idle machine and up to a second or two on a
// busy one: it is a copy of the template Main migrated (CREATE DATABASE …
// TEMPLATE), not a new migration. The pool is
// closed and the database dropped when the test ends. It fails the test
// when Main was not called from TestMain.
func NewDatabase(t TB) *pgxpool.Pool {
	t.Helper()
	return pgtest.NewPool(t)
}

// NewDatabaseURL is NewDatabase for a caller that connects by itself: it
// returns the fresh database's URL.
func NewDatabaseURL(t TB) string {
	t.Helper()
	return pgtest.NewDatabase(t)
}

// CreatePool creates the pool params describes in db, as `riverbus pool
// create` and Client.PoolCreate do, and returns it: a test needs no
// operator client for its pools. A pool of that name with the same
// settings is returned as it is. It fails the test when params are
// invalid or a pool of that name exists with other settings.
func CreatePool(t TB, db *pgxpool.Pool, params bustype.PoolParams) *bustype.Pool {
	t.Helper()
	pool, _, err := pools.Create(context.Background(), db, params)
	if err != nil {
		t.Fatalf("riverbustest: create pool %q: %v", params.Name, err)
		return nil
	}
	return pool
}

// StartClient makes a riverbus Client over db with cfg (nil: the defaults),
// starts it, and stops it when the test ends. It fails the test when the
// Client refuses cfg or cannot start (a worker's pool missing, say).
func StartClient(t TB, db *pgxpool.Pool, cfg *riverbus.Config) *riverbus.Client {
	t.Helper()
	client, err := riverbus.NewClient(db, cfg)
	if err != nil {
		t.Fatalf("riverbustest: %v", err)
		return nil
	}
	if err := client.Start(context.Background()); err != nil {
		t.Fatalf("riverbustest: %v", err)
		return nil
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = client.Stop(ctx)
	})
	return client
}

// WaitForSequence waits until pool's checkpoint reaches seq, that is until
// every job of the pool for an event at or below seq has finished
// (completed, or discarded as a dead letter), or timeout has passed, when it
// fails the test saying where the pool stands and which job holds it. Pass
// the sequence outbox.Append returned. Some Client must run the fan-out
// (Start without FanoutDisabled) for the pool to move; client itself need
// not be started.
func WaitForSequence(t TB, client *riverbus.Client, pool string, seq int64, timeout time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := client.CheckpointWait(ctx, pool, seq, nil)
	if err == nil {
		return
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("riverbustest: wait for pool %q to reach sequence %d: %v", pool, seq, err)
		return
	}
	t.Fatalf("riverbustest: pool %q did not reach sequence %d within %s: %s", pool, seq, timeout, whereItStands(client, pool))
}

// whereItStands says where pool stands and what holds its checkpoint, for
// the failure of WaitForSequence.
func whereItStands(client *riverbus.Client, pool string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := client.Status(ctx)
	if err != nil {
		return fmt.Sprintf("(no status: %v)", err)
	}
	p := st.Pool(pool)
	if p == nil {
		return "the pool no longer exists"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "horizon %d, cursor %d, checkpoint %d", st.Horizon, p.Cursor, p.Checkpoint)
	if p.Status != bustype.PoolActive {
		fmt.Fprintf(&b, ", pool %s", p.Status)
	}
	if p.Cursor < st.Horizon {
		b.WriteString(" (the fan-out is behind: is a Client started without FanoutDisabled?)")
	}
	if h := p.Holder; h != nil {
		j := h.Blocker()
		fmt.Fprintf(&b, "; held by job %d (event %d, %s, attempt %d/%d", j.ID, j.Sequence, j.State, j.Attempt, j.MaxAttempts)
		if j.DeadLetter {
			b.WriteString(", a dead letter")
		}
		if j.LastError != "" {
			fmt.Fprintf(&b, ", last error %q", j.LastError)
		}
		b.WriteString(")")
		if j.Attempt == 0 && !j.DeadLetter {
			fmt.Fprintf(&b, " never worked: does a started Client have a worker for pool %q?", pool)
		}
	}
	return b.String()
}
