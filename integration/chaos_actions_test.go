package integration_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/internal/ui"
	"github.com/riverbus/riverbus/outbox"
)

// chaosActions is what the chaos run does besides the writers and the
// kills, as an adversarial application and a busy operator would:
//
//   - poison events, which PostgreSQL accepts and no job can carry (data or
//     metadata nested deeper than Go's JSON encoder goes): each must end as
//     a dead letter of every pool with its reason, and no pool may stop;
//   - events the ordered pool's handler always fails: they become dead
//     letters, which the test retries through River UI's own HTTP API, as an
//     operator would, while the key's later events flow;
//   - two-phase-commit writers (PREPARE TRANSACTION, then COMMIT or ROLLBACK
//     PREPARED a moment later, across the PostgreSQL crash too);
//   - one sequence jump (setval far ahead), as a DBA might.
type chaosActions struct {
	db *pgxpool.Pool

	mu        sync.Mutex
	poison    map[int64]string // sequence → kind
	fail      map[int64]bool   // sequences the ordered pool's handler always fails
	prepared  []uuid.UUID      // event ids of prepared writers' events (committed or not)
	preparedN struct{ committed, rolledBack int }
	uiRetries int
	retried   map[int64]int // job id → UI retries
	jumps     int

	uiURL string
}

// startChaosActions serves River UI for the test (as `riverbus run` would)
// and returns the actions.
func startChaosActions(t *testing.T, ctx context.Context, db *pgxpool.Pool) *chaosActions {
	t.Helper()
	h, err := ui.NewHandler(ctx, db, ui.Opts{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	require.NoError(t, h.Start(ctx))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srvCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() { done <- ui.ServeListener(srvCtx, ln, h, ui.ServeOpts{Logger: slog.New(slog.DiscardHandler)}) }()
	t.Cleanup(func() {
		stop()
		<-done
		h.Stop()
	})
	return &chaosActions{db: db, poison: map[int64]string{}, fail: map[int64]bool{}, retried: map[int64]int{},
		uiURL: "http://" + ln.Addr().String()}
}

// poisonKinds are SQL expressions of events PostgreSQL stores and Go's
// encoder refuses: Go's stops at 10,000 levels; PostgreSQL's parser, at its
// default max_stack_depth, a little above that.
var poisonKinds = map[string]string{
	"deep_data":     `INSERT INTO riverbus_event (type, key, data) VALUES ('it.poison', $1, (repeat('[', 10010) || repeat(']', 10010))::jsonb) RETURNING global_sequence`,
	"deep_metadata": `INSERT INTO riverbus_event (type, key, data, metadata) VALUES ('it.poison', $1, '{}', ('{"a":' || repeat('[', 10010) || repeat(']', 10010) || '}')::jsonb) RETURNING global_sequence`,
}

// act does one action at random; errors (the database crashing) are
// ignored: an action that did not commit is not counted.
func (a *chaosActions) act(ctx context.Context, n int) {
	switch n % 4 {
	case 0:
		kinds := []string{"deep_data", "deep_metadata"}
		kind := kinds[rand.IntN(len(kinds))]
		var seq int64
		if err := a.db.QueryRow(ctx, poisonKinds[kind], fmt.Sprintf("poison-%d", n)).Scan(&seq); err == nil {
			a.mu.Lock()
			a.poison[seq] = kind
			a.mu.Unlock()
		}
	case 1:
		var seq int64
		if err := a.db.QueryRow(ctx, `INSERT INTO riverbus_event (type, key, data) VALUES ('it.fail', $1, '{"fail": true}') RETURNING global_sequence`,
			fmt.Sprintf("fail-%d", n%5)).Scan(&seq); err == nil {
			a.mu.Lock()
			a.fail[seq] = true
			a.mu.Unlock()
		}
	default:
		a.retryOrderedDeadLetters(ctx)
	}
}

// retryOrderedDeadLetters retries, through River UI's HTTP API, the ordered
// pool's dead letters, each at most twice.
func (a *chaosActions) retryOrderedDeadLetters(ctx context.Context) {
	rows, err := a.db.Query(ctx, `SELECT id FROM river_job WHERE kind = 'ordered' AND state = 'discarded' ORDER BY id`)
	if err != nil {
		return
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return
	}
	var pick []string
	a.mu.Lock()
	for _, id := range ids {
		if a.retried[id] < 2 {
			pick = append(pick, `"`+strconv.FormatInt(id, 10)+`"`)
		}
	}
	a.mu.Unlock()
	if len(pick) == 0 {
		return
	}
	if err := riverUIRequest(ctx, http.MethodPost, a.uiURL+"/api/jobs/retry", `{"ids":[`+strings.Join(pick, ",")+`]}`); err != nil {
		return
	}
	a.mu.Lock()
	for _, p := range pick {
		id, _ := strconv.ParseInt(strings.Trim(p, `"`), 10, 64)
		a.retried[id]++
	}
	a.uiRetries += len(pick)
	a.mu.Unlock()
}

// queueAction pauses or resumes (action) a River queue through River UI's
// HTTP API, as an operator would, and sets at to the database's clock once
// it has.
func (a *chaosActions) queueAction(ctx context.Context, queue, action string, at *time.Time) error {
	if err := riverUIRequest(ctx, http.MethodPut, a.uiURL+"/api/queues/"+queue+"/"+action, `{}`); err != nil {
		return err
	}
	return a.db.QueryRow(ctx, `SELECT now()`).Scan(at)
}

// riverUIRequest sends a JSON request to River UI's HTTP API, as its page
// does; any answer but 200 is an error that quotes it.
func riverUIRequest(ctx context.Context, method, url, body string) error {
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("River UI %s %s: %s: %s", method, url, resp.Status, msg)
	}
	return nil
}

// jump moves the sequence far ahead, as a DBA's setval would.
func (a *chaosActions) jump(ctx context.Context) error {
	if _, err := a.db.Exec(ctx, `SELECT setval('riverbus_event_global_sequence',
		(SELECT last_value FROM riverbus_event_global_sequence) + 1000000000000)`); err != nil {
		return err
	}
	a.mu.Lock()
	a.jumps++
	a.mu.Unlock()
	return nil
}

// preparedWriter appends one event per transaction with two-phase commit
// until ctx ends: PREPARE, a pause, then COMMIT PREPARED (two in three) or
// ROLLBACK PREPARED, retried across the PostgreSQL crash (a prepared
// transaction survives it).
func (a *chaosActions) preparedWriter(ctx context.Context, wdb *pgxpool.Pool, wg *sync.WaitGroup) {
	defer wg.Done()
	decided := 0
	for n := 0; ctx.Err() == nil; n++ {
		id := uuid.New()
		gid := "chaos-" + id.String()
		err := func() error {
			tx, err := wdb.Begin(ctx)
			if err != nil {
				return err
			}
			defer tx.Rollback(context.Background()) //nolint:errcheck
			if err := outbox.SkipNotifyTx(ctx, tx); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `INSERT INTO riverbus_event (event_id, type, key, data) VALUES ($1, 'it.prepared', $2, '{}')`,
				id, fmt.Sprintf("prepared-%d", n%7)); err != nil {
				return err
			}
			a.mu.Lock()
			a.prepared = append(a.prepared, id)
			a.mu.Unlock()
			_, err = tx.Exec(ctx, `PREPARE TRANSACTION '`+gid+`'`)
			return err
		}()
		if err != nil {
			sleepCtx(ctx, 100*time.Millisecond)
			continue
		}
		sleepCtx(ctx, time.Duration(rand.Int64N(int64(1500*time.Millisecond))))
		// The first commits and the second rolls back, so even a short
		// run on a loaded machine has both; then two in three commit.
		commit := rand.IntN(3) > 0
		switch decided++; decided {
		case 1:
			commit = true
		case 2:
			commit = false
		}
		verb := "ROLLBACK PREPARED"
		if commit {
			verb = "COMMIT PREPARED"
		}
		_ = retryFor(30*time.Second, func() error {
			_, err := a.db.Exec(context.Background(), verb+` '`+gid+`'`)
			if err != nil && strings.Contains(err.Error(), "does not exist") {
				return nil // done before the connection broke
			}
			return err
		})
		a.mu.Lock()
		if commit {
			a.preparedN.committed++
		} else {
			a.preparedN.rolledBack++
		}
		a.mu.Unlock()
		sleepCtx(ctx, time.Duration(rand.Int64N(int64(500*time.Millisecond))))
	}
}

// settle ends every prepared transaction left (a writer stopped between
// PREPARE and its decision) and adds the extra events that committed to
// committed: poison, failing and prepared ones.
func (a *chaosActions) settle(t *testing.T, ctx context.Context, committed map[int64]bool) {
	t.Helper()
	require.NoError(t, retryFor(30*time.Second, func() error {
		rows, err := a.db.Query(ctx, `SELECT gid FROM pg_prepared_xacts WHERE gid LIKE 'chaos-%' AND database = current_database()`)
		if err != nil {
			return err
		}
		gids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		for _, gid := range gids {
			if _, err := a.db.Exec(ctx, `ROLLBACK PREPARED '`+gid+`'`); err != nil {
				return err
			}
		}
		return nil
	}))
	a.mu.Lock()
	defer a.mu.Unlock()
	for seq := range a.poison {
		committed[seq] = true
	}
	for seq := range a.fail {
		committed[seq] = true
	}
	addCommittedByID(t, ctx, a.db, a.prepared, committed)
}

// addCommittedByID adds to committed the sequences of the events of ids
// that the database holds: events whose COMMIT may or may not have
// happened.
func addCommittedByID(t *testing.T, ctx context.Context, db *pgxpool.Pool, ids []uuid.UUID, committed map[int64]bool) {
	t.Helper()
	require.NoError(t, retryFor(10*time.Second, func() error {
		rows, err := db.Query(ctx, `SELECT global_sequence FROM riverbus_event WHERE event_id = ANY($1)`, ids)
		if err != nil {
			return err
		}
		seqs, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		for _, seq := range seqs {
			committed[seq] = true
		}
		return err
	}))
}

// deadLetterProblems checks every dead letter of the run: an undeliverable
// event's in each pool (with its reason), or an always-failing event's in
// the ordered pool. Anything else is a problem.
func (a *chaosActions) deadLetterProblems(t *testing.T, ctx context.Context, db *pgxpool.Pool) (problems int, examples []string) {
	t.Helper()
	type dl struct {
		pool, reason string
		seq          int64
		seqs         []int64
	}
	var dls []dl
	require.NoError(t, retryFor(10*time.Second, func() error {
		rows, err := db.Query(ctx, `SELECT kind, coalesce(args->>'undeliverable', ''), coalesce((args->>'global_sequence')::bigint, 0),
			coalesce(ARRAY(SELECT jsonb_array_elements_text(args->'sequences')::bigint), '{}')
			FROM river_job WHERE state = 'discarded'`)
		if err != nil {
			return err
		}
		dls = nil
		var d dl
		_, err = pgx.ForEachRow(rows, []any{&d.pool, &d.reason, &d.seq, &d.seqs}, func() error { dls = append(dls, d); return nil })
		return err
	}))
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, d := range dls {
		ok := false
		switch {
		case d.reason != "":
			ok = a.poison[d.seq] != ""
			for _, s := range d.seqs {
				ok = ok || a.poison[s] != ""
			}
		case d.pool == "ordered":
			ok = a.fail[d.seq]
		}
		if !ok {
			problems++
			if len(examples) < 10 {
				examples = append(examples, fmt.Sprintf("%s:%d (%q)", d.pool, d.seq, d.reason))
			}
		}
	}
	return problems, examples
}

// logUnfinished logs a stalled pool's unfinished jobs and what holds their
// lanes, for the post-mortem.
func logUnfinished(t *testing.T, ctx context.Context, db *pgxpool.Pool, pool string) {
	t.Helper()
	rows, err := db.Query(ctx, `SELECT j.id, j.state, coalesce(j.metadata->>'riverbus_lane', '-'), j.args->>'global_sequence', j.attempt, j.max_attempts,
		to_char(j.scheduled_at - now(), 'HH24:MI:SS'), left(coalesce(j.errors[array_length(j.errors, 1)]->>'error', ''), 60),
		coalesce((SELECT string_agg(o.id || ':' || o.state, ',') FROM river_job o WHERE o.kind = j.kind AND o.id <> j.id
			AND o.metadata->>'riverbus_lane' = j.metadata->>'riverbus_lane' AND o.state NOT IN ('completed', 'cancelled')), ''),
		EXISTS (SELECT 1 FROM riverbus_dead_letter d WHERE d.pool = j.kind AND d.lane = j.metadata->>'riverbus_lane')
		FROM river_job j WHERE j.kind = $1 AND j.state NOT IN ('completed', 'cancelled', 'discarded') ORDER BY j.id LIMIT 20`, pool)
	if err != nil {
		t.Logf("unfinished jobs of %s: %v", pool, err)
		return
	}
	var id int64
	var state, lane, seq, in, lastErr, others string
	var attempt, maxAttempts int
	var dead bool
	_, err = pgx.ForEachRow(rows, []any{&id, &state, &lane, &seq, &attempt, &maxAttempts, &in, &lastErr, &others, &dead}, func() error {
		t.Logf("unfinished %s job %d: %s lane %q seq %s attempt %d/%d due in %s last error %q; lane's other jobs [%s]; lane has a dead letter: %v",
			pool, id, state, lane, seq, attempt, maxAttempts, in, lastErr, others, dead)
		return nil
	})
	if err != nil {
		t.Logf("unfinished jobs of %s: %v", pool, err)
	}
}
