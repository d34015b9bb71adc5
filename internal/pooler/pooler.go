// Package pooler tells whether a database URL leads through a connection
// pooler that hands server connections to other clients between
// transactions (PgBouncer's pool_mode = transaction or statement, and
// poolers like them), which riverbus's own processes cannot run through.
//
// # Why riverbus's processes need a session
//
// The fan-out LISTENs for wake-ups, River's leader election and notifier
// LISTEN and hold session state, the workers' pause and resume arrive as
// notifications, and migrate holds its lock for the length of its run.
// Behind a transaction pooler each of these silently goes to whichever
// client runs next on the server connection: wake-ups and pauses are lost,
// and a lock can outlive the process that took it. Appends, which are
// single transactions, work through one.
//
// # How it is told
//
// Nothing a client sees on one connection tells a transaction pooler from a
// session: with no other client, such a pooler gives the connection the
// same server connection every time, session state included. What differs
// is that another client may get that server connection as soon as a
// transaction ends. Check makes that happen: it reads the backend pid of a
// first connection between transactions, then opens transactions on
// further connections, held open, and looks whether one of them runs on
// that backend, or the first connection has moved to another. On a direct
// connection or a session-mode pooler neither can happen while the first
// connection lives (a backend pid names one live session), so there is no
// false positive; a transaction pooler hands out the server connection it
// was just given back (PgBouncer reuses the most recent one first), so the
// first held transaction already shows it.
package pooler

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/riverbus/riverbus/internal/database"
)

// ErrTransactionPooler is what errors.Is finds in the *Error of Check.
var ErrTransactionPooler = errors.New("the database URL leads through a connection pooler in transaction mode")

// Error says that a process that needs a session was given a URL through a
// transaction (or statement) pooler, what showed it, and what to do.
type Error struct {
	// Who is the process or command that needs the session ("riverbus
	// fan-out", "riverbus migrate").
	Who string
	// Evidence is what was observed.
	Evidence string
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s: %s (such as PgBouncer with pool_mode = transaction): %s. "+
		"%s needs one PostgreSQL session for its whole life (LISTEN for wake-ups and pauses, River's leader election and notifier, "+
		"its locks and settings), which such a pooler hands to other clients between transactions: "+
		"give it a URL that reaches PostgreSQL directly or through a pooler in session mode "+
		"(RIVERBUS_DATABASE_URL wins over DATABASE_URL, so appenders can keep the pooler's URL, with default_query_exec_mode=exec)",
		e.Who, ErrTransactionPooler.Error(), e.Evidence, e.Who)
}

// Is makes errors.Is(err, ErrTransactionPooler) true.
func (e *Error) Is(target error) bool { return target == ErrTransactionPooler }

// TimeoutDefault bounds each round trip of Check (a BEGIN, a query) when
// ctx has no earlier deadline: PostgreSQL answers them at once, and a
// pooler with no free server connection leaves a BEGIN unanswered.
const TimeoutDefault = 10 * time.Second

// ConnectTimeoutDefault bounds each of Check's connection attempts when the
// configuration names no connect_timeout. Connecting is not what the check
// looks at: a server slow to start backends (a loaded machine, a burst of
// connections) answers late, and a process that would have connected fine
// must not fail on its probe's connection alone.
const ConnectTimeoutDefault = 30 * time.Second

// holders is how many transactions Check holds open at most: a pooler that
// gives out idle server connections in turn rather than the latest first
// still has to give out the first connection's, or move it.
const holders = 3

// Check returns an *Error naming who when cfg (as a pool or connection of
// that process would connect) leads through a transaction or statement
// pooler, nil when it reaches a session (directly or through a session
// pooler), and another error when the check could not be made. It opens up
// to four connections of its own for a few round trips, closed before it
// returns; each connection attempt waits at most cfg.ConnectTimeout
// (ConnectTimeoutDefault when unset), each round trip at most
// TimeoutDefault.
func Check(ctx context.Context, cfg *pgx.ConnConfig, who string) error {
	cfg = cfg.Copy()
	// The probe's own queries must not fail on what it looks for: named
	// prepared statements do not survive a transaction pooler.
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	cfg.RuntimeParams["application_name"] = "riverbus pooler check"
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = ConnectTimeoutDefault
	}

	// riverbus's session limits, as on every riverbus connection: a DBA's
	// statement_timeout of a millisecond must not fail the check.
	connect := func() (*pgx.Conn, error) {
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			return nil, err
		}
		applyCtx, cancel := context.WithTimeout(ctx, TimeoutDefault)
		defer cancel()
		if err := database.ServiceSession.Apply(applyCtx, conn); err != nil {
			conn.Close(context.Background())
			return nil, err
		}
		return conn, nil
	}
	pidOf := func(db interface {
		QueryRow(context.Context, string, ...any) pgx.Row
	}) (uint32, error) {
		qctx, cancel := context.WithTimeout(ctx, TimeoutDefault)
		defer cancel()
		return backendPID(qctx, db)
	}
	first, err := connect()
	if err != nil {
		return fmt.Errorf("check for a connection pooler: connect: %w", err)
	}
	defer first.Close(context.Background())
	pid, err := pidOf(first)
	if err != nil {
		return fmt.Errorf("check for a connection pooler: %w", err)
	}
	for range holders {
		conn, err := connect()
		if err != nil {
			return fmt.Errorf("check for a connection pooler: connect: %w", err)
		}
		defer conn.Close(context.Background())
		beginCtx, cancel := context.WithTimeout(ctx, TimeoutDefault)
		// The transaction outlives beginCtx: it is left open until the
		// connection closes, and pgx ties no later statement to it.
		tx, err := conn.Begin(beginCtx)
		timedOut := beginCtx.Err() != nil && ctx.Err() == nil
		cancel()
		if err != nil {
			if timedOut {
				// PostgreSQL starts a transaction at once; a pooler whose
				// server connections are all in use makes the client wait.
				return fmt.Errorf("check for a connection pooler: a new connection's BEGIN had no answer within %s, as through a pooler with no free server connection: %w", TimeoutDefault, err)
			}
			return statementMode(who, fmt.Errorf("check for a connection pooler: begin: %w", err))
		}
		// Left open until the connection closes: it holds its server
		// connection, so the first connection cannot be given it back.
		other, err := pidOf(tx)
		if err != nil {
			return statementMode(who, fmt.Errorf("check for a connection pooler: %w", err))
		}
		if other == pid {
			return &Error{Who: who, Evidence: fmt.Sprintf(
				"another client's transaction ran on the server session (backend pid %d) this client had used a moment before", pid)}
		}
		now, err := pidOf(first)
		if err != nil {
			return fmt.Errorf("check for a connection pooler: %w", err)
		}
		if now != pid {
			return &Error{Who: who, Evidence: fmt.Sprintf(
				"one client connection ran on two server sessions in turn (backend pids %d and %d)", pid, now)}
		}
	}
	return nil
}

// backendPID reads the pid of the backend a statement runs on.
func backendPID(ctx context.Context, db interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) (uint32, error) {
	var pid uint32
	if err := db.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		return 0, fmt.Errorf("read the backend pid: %w", err)
	}
	return pid, nil
}

// statementMode turns PgBouncer's refusal of a transaction block (its
// statement mode) into an *Error; other errors are returned as they are.
func statementMode(who string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && strings.Contains(pgErr.Message, "statement pool") {
		return &Error{Who: who, Evidence: fmt.Sprintf("the pooler refused a transaction block: %s", pgErr.Message)}
	}
	return err
}

// Explain adds the fix to err when it is pgx's statement cache failing
// behind a transaction pooler: pgx names its prepared statements after
// their SQL (stmtcache_…), so two clients sharing a server connection
// through the pooler find each other's, or miss their own. It returns any
// other error as it is.
func Explain(err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || !strings.Contains(pgErr.Message, "stmtcache_") ||
		(pgErr.Code != pgerrcode.DuplicatePreparedStatement && pgErr.Code != pgerrcode.InvalidSQLStatementName) {
		return err
	}
	return &PreparedStatementError{Err: err}
}

// PreparedStatementError is a failure of pgx's prepared statement cache
// through a connection pooler in transaction mode (see Explain).
type PreparedStatementError struct {
	Err error
}

func (e *PreparedStatementError) Error() string {
	return e.Err.Error() + " (pgx's cached prepared statements do not survive a connection pooler in transaction mode, such as PgBouncer: " +
		"add default_query_exec_mode=exec to the database URL of appenders and other short transactions; riverbus's own processes need a direct or session-mode URL)"
}

func (e *PreparedStatementError) Unwrap() error { return e.Err }
