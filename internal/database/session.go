package database

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"

	"github.com/riverbus/riverbus/bustype"
)

// A DBA may limit every session of a database or a role (ALTER DATABASE
// … SET statement_timeout = '30ms'): a fine guard against an application's
// runaway queries, but one that cuts River's completer and fetch short (the
// completer gave up: nothing completed while it stayed), and can cut the
// fan-out's batches and its ANALYZE of river_job. So riverbus's own
// sessions set the limits they need, each kind its own, after they connect:
// a session's SET overrides ALTER DATABASE and ALTER ROLE.

// SessionSettings are the limits a kind of riverbus session runs with.
// Zero means no limit, as in PostgreSQL.
type SessionSettings struct {
	// StatementTimeout is statement_timeout.
	StatementTimeout time.Duration
	// LockTimeout is lock_timeout.
	LockTimeout time.Duration
	// IdleInTransactionSessionTimeout is idle_in_transaction_session_timeout.
	IdleInTransactionSessionTimeout time.Duration
}

// ServiceSession is what the sessions of riverbus's long-running work run
// with: the horizon, the fan-out, retention, the workers (River's producer,
// completer and maintenance, the lanes' hand-offs, the handlers'
// transactions), River UI and the CLI's commands.
//
//   - statement_timeout 1 min: River bounds each of its own statements
//     with a context, 10 s for the hot ones (fetch, completion) and 30 s for
//     its maintenance (rescuer, scheduler, cleaner), and riverbus's batches
//     are bounded by BatchSize and BatchBytes. A minute never cuts a
//     statement that would finish, and still ends one that runs away (a bad
//     plan, a client gone without a word).
//   - lock_timeout 30 s: riverbus's own waits for locks that others may
//     hold set shorter bounds per transaction and name the holder
//     (WaitLock); River's statements rarely wait at all (SKIP LOCKED) and
//     give up after their own context's bound.
//   - idle_in_transaction_session_timeout 1 min: riverbus's transactions
//     are idle only between their statements, for milliseconds; a handler's
//     transaction (workers.RunExactlyOnce) lasts at most its job's timeout,
//     1 min by default. A process that stopped in the middle of one (a
//     paused VM, a debugger) frees its locks after a minute.
var ServiceSession = SessionSettings{
	StatementTimeout:                time.Minute,
	LockTimeout:                     30 * time.Second,
	IdleInTransactionSessionTimeout: time.Minute,
}

// Apply sets s's limits for conn's session: three SETs in one simple-
// protocol query, one round trip, which a pooler passes on as any query
// (PgBouncer refuses these settings in the startup packet, where no
// statement limit could cut them). Each SET runs under the limit it replaces, and
// statement_timeout goes first: a DBA's limit of a millisecond or two can
// cut even a SET on a loaded machine, so one cut short is tried again.
func (s SessionSettings) Apply(ctx context.Context, conn *pgx.Conn) error {
	sql := fmt.Sprintf("SET statement_timeout = '%s'; SET lock_timeout = '%s'; SET idle_in_transaction_session_timeout = '%s'",
		setting(s.StatementTimeout), setting(s.LockTimeout), setting(s.IdleInTransactionSessionTimeout))
	if err := retryCut(ctx, func() error {
		_, err := conn.Exec(ctx, sql)
		return err
	}); err != nil {
		return fmt.Errorf("set riverbus's session limits (statement_timeout, lock_timeout, idle_in_transaction_session_timeout): %w", err)
	}
	return nil
}

// retryCut runs fn, a statement far quicker than any limit a DBA means,
// again while a statement limit cuts it short (a loaded machine), at most
// cutAttempts times.
func retryCut(ctx context.Context, fn func() error) error {
	var err error
	for attempt := 1; attempt <= cutAttempts; attempt++ {
		if err = fn(); err == nil || !IsCode(err, pgerrcode.QueryCanceled) || ctx.Err() != nil {
			return err
		}
	}
	return err
}

// cutAttempts is how many times retryCut runs a statement.
const cutAttempts = 10

// Connect opens a connection of its own from cfg (not a pool's, so no
// AfterConnect runs) with s applied: without riverbus's limits a DBA's
// statement_timeout of a millisecond would cut its statements, LISTEN
// included.
func (s SessionSettings) Connect(ctx context.Context, cfg *pgx.ConnConfig) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := s.Apply(ctx, conn); err != nil {
		conn.Close(context.Background())
		return nil, err
	}
	return conn, nil
}

// AfterConnect returns a pgxpool AfterConnect hook that runs next (the
// pool's own hook; nil: none) and then applies s, so that s wins over what
// the server, the database, the role and next set.
func (s SessionSettings) AfterConnect(next func(context.Context, *pgx.Conn) error) func(context.Context, *pgx.Conn) error {
	return func(ctx context.Context, conn *pgx.Conn) error {
		if next != nil {
			if err := next(ctx, conn); err != nil {
				return err
			}
		}
		return s.Apply(ctx, conn)
	}
}

// setting renders d as a PostgreSQL time setting; 0 is no limit.
func setting(d time.Duration) string {
	if d <= 0 {
		return "0"
	}
	return LockTimeoutSetting(d)
}

// sqlSessionLimits reads the session's three limits in milliseconds, as
// shown, and where each came from.
const sqlSessionLimits = `SELECT name, setting::bigint, current_setting(name), source FROM pg_settings
	WHERE name IN ('statement_timeout', 'lock_timeout', 'idle_in_transaction_session_timeout') ORDER BY name`

// Check returns a *bustype.SessionLimitError when a session of db limits statements,
// lock waits or idle transactions to less than s does (0, no limit, is
// never less); the first such setting in name order.
func (s SessionSettings) Check(ctx context.Context, db DB) error {
	need := map[string]time.Duration{
		"statement_timeout":                   s.StatementTimeout,
		"lock_timeout":                        s.LockTimeout,
		"idle_in_transaction_session_timeout": s.IdleInTransactionSessionTimeout,
	}
	var found error
	err := retryCut(ctx, func() error {
		found = nil
		rows, err := db.Query(ctx, sqlSessionLimits)
		if err != nil {
			return err
		}
		var (
			name, shown, source string
			ms                  int64
		)
		_, err = pgx.ForEachRow(rows, []any{&name, &ms, &shown, &source}, func() error {
			have := time.Duration(ms) * time.Millisecond
			if found == nil && ms > 0 && (need[name] == 0 || have < need[name]) {
				found = &bustype.SessionLimitError{Setting: name, Value: shown, Source: strings.TrimSpace(source), Need: need[name]}
			}
			return nil
		})
		return err
	})
	if err != nil {
		return fmt.Errorf("read the session's limits: %w", err)
	}
	return found
}
