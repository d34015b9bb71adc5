package integration_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus"
	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/outbox"
)

// The neighbour's moves and the application login's: what a
// login with no riverbus grant, or with riverbus_app only, can try against
// a running riverbus. None of it may lose, cancel or stall anything.
const (
	// chaosSprayEvery is how often the neighbour sprays forged River control
	// messages: a cancel for every job running at that moment, and pause or
	// resume for every pool's queue and for "*".
	chaosSprayEvery = 100 * time.Millisecond
	// chaosPauseSpray: in each chaosPauseCycle the neighbour sprays forged
	// pauses for this long (every chaosPauseSprayEvery), then forged resumes.
	// Longer than chaosStallAfter: a pool a forged pause holds is a stall.
	chaosPauseSpray      = 20 * time.Second
	chaosPauseCycle      = 45 * time.Second
	chaosPauseSprayEvery = 500 * time.Millisecond
	// chaosLockHold is how long the neighbour sits idle in its transaction
	// holding every parse-time lock and advisory key it got, and
	// chaosLockRest how long it lets go between holds. The hold outlasts
	// chaosStallAfter, so a lock riverbus skips a step for shows as a
	// stall; a session that waits for one is seen waiting (chaosStalls).
	chaosLockHold = 15 * time.Second
	chaosLockRest = 8 * time.Second
	// chaosProbeTimeout bounds each probe run while the neighbour holds its
	// locks.
	chaosProbeTimeout = 45 * time.Second
	// chaosBigEvents events of chaosBigEventSize bytes of data are appended
	// over a run of at least chaosBigEventMinRun (the 5-minute make chaos);
	// shorter runs (make test's 30 s) append chaosBigEventSizeShort ones, a
	// light load for a shared machine that still takes the big-event paths.
	chaosBigEvents         = 3
	chaosBigEventSize      = 60 << 20
	chaosBigEventSizeShort = 4 << 20
	chaosBigEventMinRun    = 2 * time.Minute
)

// chaosAdvisoryKeys are advisory lock keys riverbus uses or once used, as
// pg_try_advisory_lock arguments: migrate's ("rbus", "migr"), the horizon
// round's before it became a table lock, the ordered lanes' buckets before
// they became rows, and AppendIf's key for the probe's event type.
func chaosAdvisoryKeys() [][]int64 {
	return [][]int64{{0x72627573, 0x6d696772}, {1919054195, 1752134249}, {appendIfTypeKey(chaosCondType)}}
}

// appendIfTypeKey is the advisory key outbox.AppendIf takes exclusive for a
// condition on an event type (outbox's typeLockKey: FNV-1a of a name space
// and the type), as a neighbour reading the source would compute it.
func appendIfTypeKey(typ string) int64 {
	h := fnv.New64a()
	h.Write([]byte("riverbus.outbox.type\x00" + typ))
	return int64(h.Sum64())
}

// chaosCondType is the event type of the AppendIf probe: its condition
// fails if an event of this type was appended after the previous probe's.
const chaosCondType = "it.cond"

// chaosNeighbourRole is the neighbour's login: it is granted nothing.
const chaosNeighbourRole = "chaos_neighbour"

// chaosNeighbour plays, for the whole run (the drain included), a login of
// the database with no riverbus grant at all (CREATE ROLE ... LOGIN, nothing
// granted: it can still connect, NOTIFY, parse statements and take advisory
// locks):
//
//   - it sprays forged River control messages on every River control channel
//     there is (<schema>.river_control for each schema with a river_job
//     table, found in pg_class): a cancel for every job running at that
//     moment (the test tells it the ids: a neighbour would spray a range),
//     and for chaosPauseSpray of every chaosPauseCycle pauses of every pool's
//     queue and of "*", then resumes;
//   - it holds parse-time locks: in one transaction, idle for chaosLockHold,
//     PREPARE ... SELECT ... FOR UPDATE and PREPARE ... DELETE of every
//     riverbus and River table, by each schema-qualified name pg_class shows
//     and by the unqualified names of the horizon's and retention's lock
//     tables (what PostgreSQL refuses before locking is counted as refused);
//   - meanwhile it holds the advisory keys of chaosAdvisoryKeys.
//
// While it holds them, the operator runs `riverbus migrate` and a retention
// step and an application an AppendIf on the probe's type; no session may
// wait for a lock the neighbour holds (chaosStalls watches).
//
// An application login (riverbus_app) meanwhile tries to choose its event's
// sequence with a temporary sequence that shadows riverbus's, and appends
// chaosBigEvents big events.
type chaosNeighbour struct {
	t     *testing.T
	admin *pgxpool.Pool // the test's own view: which jobs run, which queues exist
	cfg   *pgx.ConnConfig
	app   *pgxpool.Pool // the riverbus_app login

	stop  context.CancelFunc
	wg    sync.WaitGroup
	began time.Time // the forged pause and resume phases are timed from here
	// holding receives a value each time the neighbour has taken its locks.
	holding chan struct{}

	forged        atomic.Int64 // forged control messages sent (each to every channel)
	forgedCancels atomic.Int64 // cancels among them
	locksHeld     atomic.Int64 // PREPAREs that took their lock
	locksRefuse   atomic.Int64 // PREPAREs refused before locking
	advHeld       atomic.Int64 // advisory keys taken
	holds         atomic.Int64 // hold periods

	mu        sync.Mutex
	refusedBy map[string]int  // SQLSTATE of refused PREPAREs → count
	heldNames map[string]bool // relations whose lock the neighbour held at least once
	// The application login's moves.
	tempTried, tempPlanted int
	bigAppended            int
	bigSize                int
	ids                    []uuid.UUID // events the application login and the probe tried to append
	// The operator's pause of chaosPausedQueue against forged resumes.
	operatorPauses, pauseBreaches int
	// The probes run while the neighbour held its locks.
	probes    []string // "migrate 0.4s", ...
	condAfter int64    // the last probe event's sequence
}

// startChaosNeighbour creates the neighbour's login (no grant) and the
// application's (riverbus_app) and starts the neighbour.
func (r *chaosRun) startChaosNeighbour() {
	t, ctx := r.t, r.ctx
	n := &chaosNeighbour{t: t, admin: r.db, holding: make(chan struct{}, 1), began: time.Now(),
		refusedBy: map[string]int{}, heldNames: map[string]bool{}}
	n.cfg = r.login(chaosNeighbourRole, "")
	appCfg := r.login("chaos_app", "riverbus_app")
	pcfg, err := pgxpool.ParseConfig(r.dbURL)
	require.NoError(t, err)
	pcfg.ConnConfig = appCfg
	pcfg.MaxConns = 4
	n.app, err = pgxpool.NewWithConfig(ctx, pcfg)
	require.NoError(t, err)
	t.Cleanup(n.app.Close)
	// A policy that keeps every event of the run: retention steps (the
	// probe's and the fan-outs' own) take their lock and delete nothing.
	_, err = operator(t, r.db).RetentionSet(ctx, true, 100*365*24*time.Hour)
	require.NoError(t, err)
	nctx, stop := context.WithCancel(ctx)
	n.stop = stop
	t.Cleanup(stop)
	n.wg.Add(2)
	go n.spray(nctx)
	go n.holdLocks(nctx)
	r.neighbour = n
}

// login creates a LOGIN role (in group, unless empty) in the run's own
// server and returns a connection config for it. Its sessions use the
// simple protocol: the neighbour sends several statements at once
// (SAVEPOINT, then PREPARE), which a prepared statement cannot hold.
func (r *chaosRun) login(name, group string) *pgx.ConnConfig {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	password := hex.EncodeToString(b) // for a server that does not trust 127.0.0.1
	stmt := fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD '%s'", pgx.Identifier{name}.Sanitize(), password)
	if group != "" {
		stmt += " IN ROLE " + pgx.Identifier{group}.Sanitize()
	}
	_, err := r.db.Exec(r.ctx, stmt)
	require.NoError(r.t, err)
	cfg, err := pgx.ParseConfig(r.dbURL)
	require.NoError(r.t, err)
	cfg.User, cfg.Password = name, password
	cfg.RuntimeParams["application_name"] = name
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	return cfg
}

// stopNeighbour stops the neighbour and waits until it has let go of
// everything.
func (n *chaosNeighbour) stopNeighbour() {
	n.stop()
	n.wg.Wait()
}

// connect opens a session as the neighbour; nil while the database is down.
func (n *chaosNeighbour) connect(ctx context.Context) *pgx.Conn {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(cctx, n.cfg.Copy())
	if err != nil {
		return nil
	}
	return conn
}

// sqlControlChannels are River's control channels in this database, as the
// neighbour finds them: River listens on "<schema>.river_control", and
// pg_class shows every schema's tables to everyone.
const sqlControlChannels = `SELECT coalesce(array_agg(DISTINCT n.nspname || '.river_control'), '{}')
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relname = 'river_job' AND c.relkind IN ('r', 'p')`

// sqlRunningJobs is the test's hint to the neighbour: the jobs running now.
const sqlRunningJobs = `SELECT id, queue FROM river_job WHERE state = 'running' ORDER BY id LIMIT 2000`

// spray sends forged control messages until ctx ends.
func (n *chaosNeighbour) spray(ctx context.Context) {
	defer n.wg.Done()
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			_ = conn.Close(context.Background())
		}
	}()
	var channels []string
	var channelsAt, lastPauseSpray time.Time
	for ctx.Err() == nil {
		sleepCtx(ctx, chaosSprayEvery)
		if conn == nil {
			if conn = n.connect(ctx); conn == nil {
				sleepCtx(ctx, 500*time.Millisecond) // the database is down
				continue
			}
			channelsAt = time.Time{}
		}
		if time.Since(channelsAt) > 5*time.Second {
			if err := conn.QueryRow(ctx, sqlControlChannels).Scan(&channels); err != nil {
				_ = conn.Close(context.Background())
				conn = nil
				continue
			}
			channelsAt = time.Now()
		}
		var payloads []string
		qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		rows, err := n.admin.Query(qctx, sqlRunningJobs)
		if err == nil {
			var id int64
			var queue string
			_, err = pgx.ForEachRow(rows, []any{&id, &queue}, func() error {
				payloads = append(payloads, controlPayload("cancel", id, queue))
				return nil
			})
		}
		cancel()
		cancels := len(payloads)
		if time.Since(lastPauseSpray) >= chaosPauseSprayEvery {
			action := "resume"
			if time.Since(n.began)%chaosPauseCycle < chaosPauseSpray {
				action = "pause"
			}
			queues, qerr := n.queues(ctx)
			if qerr == nil {
				for _, q := range append(queues, "*") {
					payloads = append(payloads, controlPayload(action, 0, q))
				}
				lastPauseSpray = time.Now()
			}
		}
		if len(payloads) == 0 || len(channels) == 0 {
			continue
		}
		if _, err := conn.Exec(ctx, `SELECT count(pg_notify(c, p)) FROM unnest($1::text[]) AS c CROSS JOIN unnest($2::text[]) AS p`,
			channels, payloads); err != nil {
			_ = conn.Close(context.Background())
			conn = nil
			continue
		}
		n.forged.Add(int64(len(payloads)))
		n.forgedCancels.Add(int64(cancels))
	}
}

// queues lists the pools' River queues (the test's view; a neighbour would
// guess them from the pool names, which are the queues' by default).
func (n *chaosNeighbour) queues(ctx context.Context) ([]string, error) {
	qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	rows, err := n.admin.Query(qctx, `SELECT DISTINCT queue FROM riverbus_pool ORDER BY 1`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// controlPayload is a River control message as River's client sends it.
func controlPayload(action string, jobID int64, queue string) string {
	m := map[string]any{"action": action, "queue": queue}
	if jobID != 0 {
		m["job_id"] = jobID
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// sqlLockTargets are the relations the neighbour tries to lock at parse
// time: every riverbus and River table by its schema-qualified name, and the
// unqualified names of the two lock tables (resolved through the
// neighbour's search_path).
const sqlLockTargets = `SELECT name FROM (
	SELECT format('%I.%I', n.nspname, c.relname) AS name, c.relname NOT LIKE '%\_lock' AS later
	FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
	WHERE c.relkind IN ('r', 'p') AND (c.relname LIKE 'riverbus\_%' OR c.relname LIKE 'river\_%')
		AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\_%'
	UNION ALL
	SELECT unnest(ARRAY['riverbus_horizon_lock', 'riverbus_retention_lock']), false
) s ORDER BY later, name`

// holdLocks takes, again and again until ctx ends, every parse-time lock
// and advisory key it can, and sits idle in its transaction for
// chaosLockHold.
func (n *chaosNeighbour) holdLocks(ctx context.Context) {
	defer n.wg.Done()
	for ctx.Err() == nil {
		conn := n.connect(ctx)
		if conn == nil {
			sleepCtx(ctx, 500*time.Millisecond) // the database is down
			continue
		}
		if err := n.lockAll(ctx, conn); err == nil {
			n.holds.Add(1)
			select {
			case n.holding <- struct{}{}:
			default:
			}
			sleepCtx(ctx, chaosLockHold) // the neighbour's move: sit idle holding the locks
		}
		// Closing the session ends its transaction and its advisory locks.
		_ = conn.Close(context.Background())
		sleepCtx(ctx, chaosLockRest)
	}
}

// lockAll opens the neighbour's transaction and PREPAREs, each in a
// savepoint, a SELECT ... FOR UPDATE and a DELETE of every target, then
// takes the advisory keys.
func (n *chaosNeighbour) lockAll(ctx context.Context, conn *pgx.Conn) error {
	rows, err := conn.Query(ctx, sqlLockTargets)
	if err != nil {
		return err
	}
	targets, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	// A neighbour may outlive the DBA's idle_in_transaction_session_timeout
	// as any login may; lock_timeout keeps it from queueing behind a lock
	// for long itself.
	if _, err := conn.Exec(ctx, `BEGIN; SET LOCAL idle_in_transaction_session_timeout = 0; SET LOCAL lock_timeout = '2s'`); err != nil {
		return err
	}
	stmt := 0
	for _, target := range targets {
		for _, form := range []string{"SELECT * FROM %s FOR UPDATE", "DELETE FROM %s"} {
			stmt++
			// target comes from format('%I.%I') or is a fixed name.
			sql := fmt.Sprintf("SAVEPOINT s; PREPARE chaos_%d AS "+form, stmt, target)
			if _, err := conn.Exec(ctx, sql); err != nil {
				var pgErr *pgconn.PgError
				if !errors.As(err, &pgErr) {
					return err // the connection broke
				}
				if _, err := conn.Exec(ctx, `ROLLBACK TO SAVEPOINT s`); err != nil {
					return err
				}
				n.locksRefuse.Add(1)
				n.mu.Lock()
				n.refusedBy[pgErr.Code]++
				n.mu.Unlock()
				continue
			}
			n.locksHeld.Add(1)
			n.mu.Lock()
			n.heldNames[target] = true
			n.mu.Unlock()
		}
	}
	for _, key := range chaosAdvisoryKeys() {
		var ok bool
		var err error
		if len(key) == 2 {
			err = conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1::int, $2::int)`, key[0], key[1]).Scan(&ok)
		} else {
			err = conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1::bigint)`, key[0]).Scan(&ok)
		}
		if err != nil {
			return err
		}
		if ok {
			n.advHeld.Add(1)
		}
	}
	for _, pool := range []string{chaosOrdered, chaosLateOrdered} {
		var got int64
		if err := conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE pg_try_advisory_lock(hashtext('riverbus.lane:' || $1::text), b))
			FROM generate_series(0, 127) AS b`, pool).Scan(&got); err != nil {
			return err
		}
		n.advHeld.Add(got)
	}
	return nil
}

// probeLocks runs, each time the neighbour has taken its locks and while
// the writers run, what an application and an operator would, all at once:
// an AppendIf on the probe's type, a retention step (under the run's policy,
// which keeps every event: the step takes its lock and deletes nothing),
// and every other time `riverbus migrate`. If one waits for a lock the
// neighbour holds, chaosStalls sees it waiting.
func (r *chaosRun) probeLocks() {
	n, wctx := r.neighbour, r.wctx
	defer r.load.wg.Done()
	for i := 0; ; i++ {
		select {
		case <-wctx.Done():
			return
		case <-n.holding:
		}
		var wg sync.WaitGroup
		wg.Go(n.probeAppendIf)
		wg.Go(func() { n.probeRetention(r.t) })
		if i%2 == 0 {
			wg.Go(func() { n.probeMigrate(r) })
		}
		wg.Wait()
	}
}

// probeRetention runs one retention step, as `riverbus retention --apply`
// or a fan-out's retention service would.
func (n *chaosNeighbour) probeRetention(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), chaosProbeTimeout)
	defer cancel()
	began := time.Now()
	_, err := operator(t, n.admin).RetentionTrim(ctx, &riverbus.RetentionOpts{MaxBatches: 1})
	n.mu.Lock()
	defer n.mu.Unlock()
	n.probeDone("retention step", time.Since(began), err)
}

// probeAppendIf appends one event with AppendIf, its condition on
// chaosCondType, as the superuser (the probe is about locks, not grants).
func (n *chaosNeighbour) probeAppendIf() {
	ctx, cancel := context.WithTimeout(context.Background(), chaosProbeTimeout)
	defer cancel()
	id := n.tryAppend()
	n.mu.Lock()
	after := n.condAfter
	n.mu.Unlock()
	began := time.Now()
	res, err := outbox.AppendIf(ctx, n.admin, outbox.AppendCondition{
		FailIfEventsMatch: outbox.Query{{Types: []string{chaosCondType}}}, After: after,
	}, outbox.Event{EventID: id, Type: chaosCondType, Key: "cond", Data: json.RawMessage(`{}`)})
	took := time.Since(began)
	n.mu.Lock()
	defer n.mu.Unlock()
	if err == nil {
		n.condAfter = res[0].GlobalSequence
	}
	n.probeDone("AppendIf", took, err)
}

// probeMigrate runs `riverbus migrate` as the operator would on a deploy.
func (n *chaosNeighbour) probeMigrate(r *chaosRun) {
	began := time.Now()
	p := start(r.t, r.dbURL, "riverbus", []string{"PGAPPNAME=chaos-migrate"}, "migrate")
	var err error
	select {
	case <-p.done:
		err = p.err
		if err != nil {
			err = fmt.Errorf("%w: %s", err, p.out.String())
		}
	case <-time.After(chaosProbeTimeout):
		p.kill9()
		err = errors.New("still waiting, killed")
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.probeDone("migrate", time.Since(began), err)
}

// probeDone records a probe's outcome, for the log; n.mu is held. Whether
// it waited for the neighbour is chaosStalls' to see; an error (the
// database restarting) is logged.
func (n *chaosNeighbour) probeDone(what string, took time.Duration, err error) {
	n.probes = append(n.probes, fmt.Sprintf("%s %s", what, took.Round(100*time.Millisecond)))
	if err != nil {
		n.t.Logf("%s probe failed: %v", what, err)
	}
}

// tempSequence is the application login's move: a temporary sequence named
// like riverbus's, started far above it, then an append in the same
// session. pg_temp is searched first for an unqualified sequence name: if
// the event gets the temporary sequence's number, the appender chose its
// sequence. It runs once, at 2/5 of the run, retried across the PostgreSQL
// crash.
func (r *chaosRun) tempSequence() {
	n, wctx := r.neighbour, r.wctx
	defer r.load.wg.Done()
	sleepCtx(wctx, r.dur*2/5)
	if wctx.Err() != nil {
		return
	}
	id := n.tryAppend()
	plants := map[int64]bool{}
	err := retryFor(30*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := n.app.Acquire(ctx)
		if err != nil {
			return err
		}
		// The temporary sequence lives as long as the session: never give
		// the session back to the pool.
		defer func() { _ = conn.Conn().Close(context.Background()); conn.Release() }()
		var last int64
		if err := n.admin.QueryRow(ctx, `SELECT last_value FROM riverbus_event_global_sequence`).Scan(&last); err != nil {
			return err
		}
		plant := last + 1_000_000
		plants[plant] = true
		var pgErr *pgconn.PgError
		if _, err := conn.Exec(ctx, fmt.Sprintf(`CREATE TEMP SEQUENCE riverbus_event_global_sequence START %d`, plant)); errors.As(err, &pgErr) {
			r.t.Logf("%5.1fs temporary sequence refused: %v", r.elapsed(), err) // nothing to plant: append all the same
		} else if err != nil {
			return err
		}
		var seq int64
		err = conn.QueryRow(ctx, `INSERT INTO riverbus_event (event_id, type, key, data) VALUES ($1, 'it.tempseq', 'tempseq', '{}') RETURNING global_sequence`, id).Scan(&seq)
		switch {
		case errors.As(err, &pgErr) && pgErr.Code == pgerrcode.UniqueViolation:
			// An earlier try committed and its answer was lost.
			if err := n.admin.QueryRow(ctx, `SELECT global_sequence FROM riverbus_event WHERE event_id = $1`, id).Scan(&seq); err != nil {
				return err
			}
		case errors.As(err, &pgErr):
			r.t.Logf("%5.1fs append with a temporary sequence refused: %v", r.elapsed(), err)
			seq = 0
		case err != nil:
			return err
		}
		n.mu.Lock()
		n.tempTried++
		if plants[seq] {
			n.tempPlanted++
		}
		n.mu.Unlock()
		r.t.Logf("%5.1fs application login appended with a temporary sequence started at %d: its event got %d", r.elapsed(), plant, seq)
		return nil
	})
	if err != nil {
		r.t.Errorf("temporary sequence append: %v", err)
	}
}

// startBigEvents starts the application login's other move: chaosBigEvents
// events with data of chaosBigEventSize bytes (chaosBigEventSizeShort in
// short runs), the i-th at i/(chaosBigEvents+1) of the run, each in a
// goroutine of its own: on a busy machine one insert takes a minute.
func (r *chaosRun) startBigEvents() {
	size := chaosBigEventSize
	if r.dur < chaosBigEventMinRun {
		size = chaosBigEventSizeShort
	}
	r.neighbour.bigSize = size
	for i := range chaosBigEvents {
		r.load.wg.Add(1)
		go r.bigEvent(i, size)
	}
}

// bigEvent appends the i-th big event. The data is built by the server, so
// the test does not send it.
func (r *chaosRun) bigEvent(i, size int) {
	n, wctx := r.neighbour, r.wctx
	defer r.load.wg.Done()
	sleepCtx(wctx, r.dur*time.Duration(i+1)/(chaosBigEvents+1))
	if wctx.Err() != nil {
		return
	}
	id := n.tryAppend()
	err := retryFor(30*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		// The blob's JSON string adds a little to size: stay under the
		// 64 MiB event limit.
		_, err := n.app.Exec(ctx, `INSERT INTO riverbus_event (event_id, type, key, data)
			VALUES ($1, 'it.big', $2, jsonb_build_object('blob', repeat('x', $3::int - 16)))`, id, fmt.Sprintf("big-%d", i), size)
		if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == pgerrcode.UniqueViolation {
			return nil // an earlier try committed and its answer was lost
		}
		return err
	})
	if err != nil {
		r.t.Errorf("big event %d: %v", i, err)
		return
	}
	n.mu.Lock()
	n.bigAppended++
	n.mu.Unlock()
	r.t.Logf("%5.1fs application login appended a %d MiB event", r.elapsed(), size>>20)
}

// settle adds the events the application login and the probes committed,
// read by their ids.
func (n *chaosNeighbour) settle(t *testing.T, committed map[int64]bool) {
	t.Helper()
	n.mu.Lock()
	ids := slices.Clone(n.ids)
	n.mu.Unlock()
	addCommittedByID(t, context.Background(), n.admin, ids, committed)
}

// tryAppend returns the id of an event the application login or a probe is
// about to append: whether it committed is read by id in settle, as the
// writers do for a COMMIT whose answer was lost.
func (n *chaosNeighbour) tryAppend() uuid.UUID {
	id := uuid.New()
	n.mu.Lock()
	n.ids = append(n.ids, id)
	n.mu.Unlock()
	return id
}

// chaosNeighbourResults is what the neighbour and the application login did
// and what it did to the run.
type chaosNeighbourResults struct {
	forged, cancels      int64
	locksHeld, refused   int64
	advHeld, holds       int64
	refusedBy, heldNames string
	tempTried, planted   int
	big, bigSize         int
	probes               []string
	pauses, breaches     int      // operator pauses against forged resumes; jobs run through them
	cancelled            int      // pool jobs that ended cancelled (nobody in the run asked)
	cancelledExamples    []string // "pool:job id:sequence"
}

// results reads the neighbour's counters and the cancelled jobs of pools.
// The run's operator never cancels a job (its River UI actions are retries
// of dead letters), and no handler of the run returns JobCancel, so every
// cancelled job of a pool is one nobody asked for.
func (r *chaosRun) neighbourResults() chaosNeighbourResults {
	n := r.neighbour
	n.mu.Lock()
	res := chaosNeighbourResults{forged: n.forged.Load(), cancels: n.forgedCancels.Load(),
		locksHeld: n.locksHeld.Load(), refused: n.locksRefuse.Load(), advHeld: n.advHeld.Load(), holds: n.holds.Load(),
		tempTried: n.tempTried, planted: n.tempPlanted, big: n.bigAppended, bigSize: n.bigSize,
		probes: slices.Clone(n.probes), pauses: n.operatorPauses, breaches: n.pauseBreaches}
	var by []string
	for _, code := range slices.Sorted(maps.Keys(n.refusedBy)) {
		by = append(by, fmt.Sprintf("%s:%d", code, n.refusedBy[code]))
	}
	res.refusedBy = strings.Join(by, ",")
	res.heldNames = strings.Join(slices.Sorted(maps.Keys(n.heldNames)), ",")
	n.mu.Unlock()
	require.NoError(r.t, retryFor(10*time.Second, func() error {
		rows, err := r.db.Query(r.ctx, `SELECT kind || ':' || id || ':' || coalesce(args->>'global_sequence', '?')
			FROM river_job WHERE state = 'cancelled' AND kind = ANY($1) ORDER BY id`, r.allPools())
		if err != nil {
			return err
		}
		all, err := pgx.CollectRows(rows, pgx.RowTo[string])
		res.cancelled = len(all)
		res.cancelledExamples = all[:min(len(all), 10)]
		return err
	}))
	return res
}

// chaosPausedQueue is the queue the operator pauses through River UI while
// the neighbour sprays forged resumes: the grouped pool's, worked by the
// test's own client, which is never killed (a new process would read the
// pause from the database anyway).
var chaosPausedQueue = bustype.DefaultQueue(chaosGrouped)

// operatorPause pauses chaosPausedQueue through River UI's HTTP API, as an
// operator would, for the whole of the neighbour's first forged-resume
// phase (a second inside each end), then resumes it. The pool's fan-out
// pauses with the queue (one pause, migration 023), so the jobs waiting
// are those it made before; a producer that a forged resume wakes runs
// them: any job of the queue that starts more than chaosStallAfter after
// the pause and before the operator's resume is a breach. How many were
// waiting is logged: none waiting, and no breach could show. It needs a run of at least chaosPauseCycle, to end before the
// writers do.
func (r *chaosRun) operatorPause() {
	n, wctx := r.neighbour, r.wctx
	defer r.load.wg.Done()
	if r.dur < chaosPauseCycle {
		return
	}
	sleepCtx(wctx, time.Until(n.began.Add(chaosPauseSpray+time.Second)))
	if wctx.Err() != nil {
		return
	}
	var pausedAt, resumedAt time.Time
	if err := retryFor(30*time.Second, func() error { return r.actions.queueAction(r.ctx, chaosPausedQueue, "pause", &pausedAt) }); err != nil {
		r.t.Errorf("pause queue %s through River UI: %v", chaosPausedQueue, err)
		return
	}
	var waiting int
	_ = r.db.QueryRow(r.ctx, `SELECT count(*) FROM river_job WHERE queue = $1 AND state IN ('available', 'retryable', 'scheduled')`,
		chaosPausedQueue).Scan(&waiting)
	r.t.Logf("%5.1fs operator paused queue %s through River UI while the neighbour sprays forged resumes; %d of its jobs wait", r.elapsed(), chaosPausedQueue, waiting)
	time.Sleep(time.Until(n.began.Add(chaosPauseCycle - time.Second))) // the pause lasts the neighbour's resume phase
	if err := retryFor(60*time.Second, func() error { return r.actions.queueAction(r.ctx, chaosPausedQueue, "resume", &resumedAt) }); err != nil {
		r.t.Errorf("resume queue %s through River UI: %v", chaosPausedQueue, err)
		return
	}
	var breaches int
	require.NoError(r.t, retryFor(10*time.Second, func() error {
		return r.db.QueryRow(r.ctx, `SELECT count(*) FROM river_job WHERE queue = $1 AND attempted_at > $2 AND attempted_at < $3`,
			chaosPausedQueue, pausedAt.Add(chaosStallAfter), resumedAt).Scan(&breaches)
	}))
	n.mu.Lock()
	n.operatorPauses++
	n.pauseBreaches += breaches
	n.mu.Unlock()
	r.t.Logf("%5.1fs operator resumed queue %s: %d of its jobs started over %s into the pause", r.elapsed(), chaosPausedQueue, breaches, chaosStallAfter)
}
