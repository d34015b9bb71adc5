package database

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Every lock riverbus waits for is waited for with a lock_timeout, and a
// wait that runs out names who held the lock: a wait without a bound stops
// a pool reset, retention or a migration for as long as the holder likes,
// and one with a bound but no name leaves the operator guessing which of a
// hundred sessions to end.

// LockTimeoutDefault bounds a lock wait when the caller names no timeout.
const LockTimeoutDefault = 5 * time.Second

// SQLLockTimeoutSet sets lock_timeout ($1, e.g. '5000ms') for the rest of
// the transaction and keeps the value it replaces, which
// SQLLockTimeoutRestore puts back. The two go in the same round trips as
// the statements they bound (a pgx.Batch), so a bound costs no round trip.
const SQLLockTimeoutSet = `SELECT set_config('riverbus.lock_timeout_was', current_setting('lock_timeout'), true),
	set_config('lock_timeout', $1, true)`

// SQLLockTimeoutRestore puts back the lock_timeout SQLLockTimeoutSet replaced.
const SQLLockTimeoutRestore = `SELECT set_config('lock_timeout', current_setting('riverbus.lock_timeout_was'), true)`

// LockTimeoutSetting renders d as a lock_timeout value (at least 1 ms: 0
// would mean no bound at all).
func LockTimeoutSetting(d time.Duration) string {
	return strconv.FormatInt(max(d.Milliseconds(), 1), 10) + "ms"
}

// LockHolder is a session that held a lock another one waited for, as
// pg_stat_activity showed it while the wait lasted.
type LockHolder struct {
	// PID is the holder's backend process id (0: a prepared transaction).
	PID int32
	// Role is the holder's login role (usename).
	Role string
	// ApplicationName is the application_name the holder set.
	ApplicationName string
	// State is the holder's state ("idle in transaction", "active"), empty
	// when the observer may not see it (another role's session, without
	// pg_read_all_stats).
	State string
	// StateFor is how long the holder had been in State.
	StateFor time.Duration
}

func (h LockHolder) String() string {
	if h.PID == 0 {
		return "a prepared transaction (see pg_prepared_xacts)"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "pid %d (role %s, application_name %q", h.PID, orUnknown(h.Role), h.ApplicationName)
	if h.State != "" {
		fmt.Fprintf(&b, ", %s for %s", h.State, h.StateFor.Round(time.Second))
	}
	b.WriteString(")")
	return b.String()
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// LockWaitError is the error of a statement that waited its lock_timeout
// for a lock. It unwraps to the PostgreSQL error (SQLSTATE 55P03).
type LockWaitError struct {
	// Op is what waited ("pool reset").
	Op string
	// Waited is the lock_timeout that ran out.
	Waited time.Duration
	// Lock names what was waited for ("lock on riverbus_retention_lock"),
	// as pg_locks showed the wait; empty when it ended before it was seen.
	Lock string
	// Holders are the sessions pg_blocking_pids named while the statement
	// waited, the last time they were looked at.
	Holders []LockHolder
	// Err is the PostgreSQL error.
	Err error
}

func (e *LockWaitError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: waited %s for %s", e.Op, e.Waited, cmp.Or(e.Lock, "a lock"))
	if len(e.Holders) == 0 {
		b.WriteString(" (its holder was not seen: the wait was too short to look, or the holder had just left)")
		return b.String()
	}
	b.WriteString(" held by ")
	for i, h := range e.Holders {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(h.String())
	}
	return b.String()
}

func (e *LockWaitError) Unwrap() error { return e.Err }

// sqlLockWaiters reads, for the backend $1, what it waits for and who
// blocks it. A row lock's wait shows in pg_locks as a wait for the
// holder's transaction, with the tuple lock of the row granted: the table
// is named from that.
const sqlLockWaiters = `WITH w AS (
	SELECT coalesce(
		(SELECT 'lock on ' || l.relation::regclass::text FROM pg_locks l
		 WHERE l.pid = $1 AND NOT l.granted AND l.relation IS NOT NULL LIMIT 1),
		(SELECT 'row lock on ' || l.relation::regclass::text FROM pg_locks l
		 WHERE l.pid = $1 AND l.granted AND l.locktype = 'tuple' LIMIT 1),
		(SELECT l.locktype || ' lock' FROM pg_locks l WHERE l.pid = $1 AND NOT l.granted LIMIT 1),
		'') AS what
)
SELECT b.pid, coalesce(a.usename::text, ''), coalesce(a.application_name, ''), coalesce(a.state, ''),
	coalesce(extract(epoch FROM clock_timestamp() - a.state_change), 0)::float8, w.what
FROM w, unnest(pg_blocking_pids($1)) AS b(pid) LEFT JOIN pg_stat_activity a ON a.pid = b.pid
ORDER BY b.pid`

// lockWatch looks, through a connection of its own, at who blocks a
// waiting backend, and keeps what it saw last.
type lockWatch struct {
	mu       sync.Mutex
	what     string
	holders  []LockHolder
	notify   LockWaitFunc
	notified bool
}

// LockWaitFunc is told, once per wait, what a statement waits for and who
// holds it, as soon as the watch has seen them: a wait with a long bound
// (a migration's, minutes) says what it waits for from its first second,
// not only when it gives up.
type LockWaitFunc func(lock string, holders []LockHolder)

func (w *lockWatch) look(ctx context.Context, conn *pgx.Conn, pid uint32) error {
	rows, err := conn.Query(ctx, sqlLockWaiters, pid)
	if err != nil {
		return err
	}
	var what string
	holders, err := CollectLockHolders(rows, &what)
	if err != nil || len(holders) == 0 {
		return err
	}
	w.mu.Lock()
	w.what, w.holders = what, holders
	notify := w.notify != nil && !w.notified
	w.notified = w.notified || notify
	w.mu.Unlock()
	if notify {
		w.notify(what, holders)
	}
	return nil
}

// CollectLockHolders reads rows of (pid, role, application_name, state,
// seconds in that state) and then the columns scanned into extra, whose
// values are those of the last row.
func CollectLockHolders(rows pgx.Rows, extra ...any) ([]LockHolder, error) {
	var holders []LockHolder
	var h LockHolder
	var secs float64
	_, err := pgx.ForEachRow(rows, append([]any{&h.PID, &h.Role, &h.ApplicationName, &h.State, &secs}, extra...), func() error {
		h.StateFor = time.Duration(secs * float64(time.Second))
		holders = append(holders, h)
		return nil
	})
	return holders, err
}

// watch looks every interval, from the first look after delay, until ctx
// ends. The connection is made only if the wait lasts that long, so a
// statement that gets its lock at once costs nothing.
func (w *lockWatch) watch(ctx context.Context, config func() *pgx.ConnConfig, pid uint32, delay, interval time.Duration) {
	timer := time.NewTimer(delay)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return
	case <-timer.C:
	}
	cfg := config().Copy()
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	cfg.RuntimeParams["application_name"] = "riverbus lock watch"
	conn, err := ServiceSession.Connect(ctx, cfg)
	if err != nil {
		return // the error names no holder; the wait's own error stands
	}
	defer conn.Close(context.Background())
	for {
		if err := w.look(ctx, conn, pid); err != nil {
			return
		}
		timer.Reset(interval)
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
	}
}

// WaitLock runs fn, statements on the connection whose backend is pid
// (configured as config returns, called only if the wait lasts) that may
// wait for locks under a lock_timeout of timeout, which the caller has set. While they wait, a second connection
// made like the first asks pg_blocking_pids who holds the lock; when the
// wait runs out (SQLSTATE 55P03) WaitLock returns a *LockWaitError that
// names them. Any other error is returned as it is.
func WaitLock(ctx context.Context, config func() *pgx.ConnConfig, pid uint32, op string, timeout time.Duration, fn func() error) error {
	return WaitLockNotify(ctx, config, pid, op, timeout, nil, fn)
}

// WaitLockNotify is WaitLock that also calls notify (when not nil) once,
// while the wait lasts, with what is waited for and who holds it.
func WaitLockNotify(ctx context.Context, config func() *pgx.ConnConfig, pid uint32, op string, timeout time.Duration, notify LockWaitFunc, fn func() error) error {
	watchCtx, stop := context.WithCancel(ctx)
	w := &lockWatch{notify: notify}
	var done sync.WaitGroup
	done.Add(1)
	go func() {
		defer done.Done()
		// Most waits end at once; the first look comes well before the
		// bound, so a holder that stays is seen however short the bound.
		w.watch(watchCtx, config, pid, min(timeout/4, 200*time.Millisecond), min(max(timeout/5, 50*time.Millisecond), time.Second))
	}()
	err := fn()
	stop()
	done.Wait()
	if !IsCode(err, pgerrcode.LockNotAvailable) {
		return err
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || !strings.Contains(pgErr.Message, "lock timeout") {
		return err // NOWAIT's refusal: not a wait that ran out
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return &LockWaitError{Op: op, Waited: timeout, Lock: w.what, Holders: w.holders, Err: err}
}

// WaitLockTx sets lock_timeout to timeout for fn's statements on tx, runs
// them as WaitLock does, and puts the transaction's lock_timeout back when
// they succeed.
func WaitLockTx(ctx context.Context, tx pgx.Tx, op string, timeout time.Duration, fn func() error) error {
	return WaitLockTxNotify(ctx, tx, op, timeout, nil, fn)
}

// WaitLockTxNotify is WaitLockTx with WaitLockNotify's notify.
func WaitLockTxNotify(ctx context.Context, tx pgx.Tx, op string, timeout time.Duration, notify LockWaitFunc, fn func() error) error {
	if _, err := tx.Exec(ctx, SQLLockTimeoutSet, LockTimeoutSetting(timeout)); err != nil {
		return fmt.Errorf("%s: set lock_timeout: %w", op, err)
	}
	conn := tx.Conn()
	if err := WaitLockNotify(ctx, conn.Config, conn.PgConn().PID(), op, timeout, notify, fn); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, SQLLockTimeoutRestore); err != nil {
		return fmt.Errorf("%s: restore lock_timeout: %w", op, err)
	}
	return nil
}

// WrapOp prefixes err with op ("op: err"), unless err is a *LockWaitError,
// whose message starts with the operation that waited already.
func WrapOp(op string, err error) error {
	var lockErr *LockWaitError
	if err == nil || errors.As(err, &lockErr) {
		return err
	}
	return fmt.Errorf("%s: %w", op, err)
}
