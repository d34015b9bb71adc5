package fanout_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/fanout"
	"github.com/riverbus/riverbus/internal/testwait"
)

// deepDepth is deeper than encoding/json accepts (10,000) and than
// PostgreSQL's jsonb parser accepts at its default max_stack_depth (2MB),
// which the test raises for its own session, as a DBA could.
const deepDepth = 20_000

// appendDeep appends an event whose data (or metadata) is JSON nested
// deepDepth levels deep, by SQL as any writer could, and returns its
// sequence.
func appendDeep(t *testing.T, db *pgxpool.Pool, key string, inMetadata bool) int64 {
	t.Helper()
	ctx := context.Background()
	conn, err := db.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, `SET max_stack_depth = '7MB'`)
	require.NoError(t, err)
	deep := strings.Repeat("[", deepDepth) + strings.Repeat("]", deepDepth)
	data, metadata := deep, `{}`
	if inMetadata {
		data, metadata = `{"n": 1}`, `{"deep": `+deep+`}`
	}
	var seq int64
	require.NoError(t, conn.QueryRow(ctx,
		`INSERT INTO riverbus_event (type, key, data, metadata) VALUES ('deep', $1, $2::text::jsonb, $3::text::jsonb) RETURNING global_sequence`,
		key, data, metadata).Scan(&seq))
	_, err = conn.Exec(ctx, `RESET max_stack_depth`)
	require.NoError(t, err)
	return seq
}

func appendOK(t *testing.T, db *pgxpool.Pool, key string) int64 {
	t.Helper()
	var seq int64
	require.NoError(t, db.QueryRow(context.Background(),
		`INSERT INTO riverbus_event (type, key, data) VALUES ('ok', $1, '{"n": 1}') RETURNING global_sequence`, key).Scan(&seq))
	return seq
}

type jobState struct {
	state         string
	undeliverable string
	lane          string
}

// jobStates returns, per global sequence, the state of pool's job, its
// undeliverable marker and its lane.
func jobStates(t *testing.T, db *pgxpool.Pool, pool string) map[int64]jobState {
	t.Helper()
	rows, err := db.Query(context.Background(), `SELECT (args->>'global_sequence')::bigint, state::text,
		coalesce(args->>'undeliverable', ''), coalesce(metadata->>'riverbus_lane', '')
		FROM river_job WHERE kind = $1`, pool)
	require.NoError(t, err)
	out := map[int64]jobState{}
	for rows.Next() {
		var seq int64
		var s jobState
		require.NoError(t, rows.Scan(&seq, &s.state, &s.undeliverable, &s.lane))
		out[seq] = s
	}
	require.NoError(t, rows.Err())
	return out
}

type deadLetter struct {
	lane, lastError, undeliverable string
}

func deadLetters(t *testing.T, db *pgxpool.Pool, pool string) map[int64]deadLetter {
	t.Helper()
	rows, err := db.Query(context.Background(), `SELECT global_sequence, coalesce(lane, ''), errors->-1->>'error',
		coalesce(args->>'undeliverable', '') FROM riverbus_dead_letter WHERE pool = $1`, pool)
	require.NoError(t, err)
	out := map[int64]deadLetter{}
	for rows.Next() {
		var seq int64
		var d deadLetter
		require.NoError(t, rows.Scan(&seq, &d.lane, &d.lastError, &d.undeliverable))
		out[seq] = d
	}
	require.NoError(t, rows.Err())
	return out
}

func drain(t *testing.T, f *fanout.Fanout) {
	t.Helper()
	for pass(t, f).More {
	}
	pass(t, f)
}

// An event nested deeper than encoding/json accepts, in data or in
// metadata, becomes a dead letter of each pool with the reason, and every
// pool goes on: plain pools on both fan-out paths, and ordered pools, whose
// key follows the pool's dead-letter policy.
func TestDeepEventBecomesDeadLetter(t *testing.T) {
	t.Parallel()
	b := setup(t)
	createPool(t, b.db, bustype.PoolParams{Name: "plain"})
	createPool(t, b.db, bustype.PoolParams{Name: "keyed-block", Ordering: bustype.OrderingKey, OnDeadLetter: bustype.DeadLetterBlock})
	createPool(t, b.db, bustype.PoolParams{Name: "keyed-release", Ordering: bustype.OrderingKey, OnDeadLetter: bustype.DeadLetterRelease})
	createPool(t, b.db, bustype.PoolParams{Name: "other", EventTypes: []string{"ok"}})
	f := newFanout(t, b.db, fanout.Config{})

	first := appendOK(t, b.db, "a")
	drain(t, f)
	require.True(t, f.UsesPlainPath("plain"), "the next batch of pool plain takes the plain path")

	deepData := appendDeep(t, b.db, "b", false)
	sameKey := appendOK(t, b.db, "b")
	deepMeta := appendDeep(t, b.db, "c", true)
	otherKey := appendOK(t, b.db, "d")
	drain(t, f)

	for _, pool := range []string{"plain", "keyed-block", "keyed-release"} {
		jobs := jobStates(t, b.db, pool)
		require.Len(t, jobs, 5, pool)
		for _, seq := range []int64{deepData, deepMeta} {
			require.Equal(t, "discarded", jobs[seq].state, "%s: event %d", pool, seq)
			require.True(t, strings.HasPrefix(jobs[seq].undeliverable, "too deep: "), pool)
			require.Contains(t, jobs[seq].undeliverable, "exceeded max depth", pool)
		}
		dls := deadLetters(t, b.db, pool)
		require.Len(t, dls, 2, pool)
		for _, seq := range []int64{deepData, deepMeta} {
			require.Contains(t, dls[seq].lastError, "exceeded max depth", pool)
			require.Equal(t, dls[seq].lastError, dls[seq].undeliverable, pool)
		}
		require.Equal(t, "available", jobs[first].state, pool)
		require.Equal(t, "available", jobs[otherKey].state, pool)
		require.Equal(t, int64(2), f.Stats().Undeliverable[pool], pool)
	}
	// The key of the dead letter: held where dead letters block, going on
	// where they release.
	require.Equal(t, "pending", jobStates(t, b.db, "keyed-block")[sameKey].state)
	require.Equal(t, "b", deadLetters(t, b.db, "keyed-block")[deepData].lane)
	require.Equal(t, "available", jobStates(t, b.db, "keyed-release")[sameKey].state)
	require.Equal(t, "available", jobStates(t, b.db, "plain")[sameKey].state)
	require.True(t, f.UsesPlainPath("plain"), "pool plain is back on the plain path")

	// The pool that never matched the deep events saw none of it.
	require.Len(t, jobStates(t, b.db, "other"), 3)
	require.Empty(t, deadLetters(t, b.db, "other"))
	require.Zero(t, f.Stats().Undeliverable["other"])

	// Later events go on, on the plain path too.
	next := appendOK(t, b.db, "e")
	drain(t, f)
	for _, pool := range []string{"plain", "keyed-block", "keyed-release", "other"} {
		require.Equal(t, "available", jobStates(t, b.db, pool)[next].state, pool)
	}
}

// An envelope the database refuses (a limit such as jsonb's size, stood in
// for here by a trigger that raises the same class of error) becomes a
// dead letter with the reason, on the path where the database builds the
// args; the events around it are delivered.
func TestRefusedEnvelopeBecomesDeadLetter(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.db.Exec(context.Background(), `CREATE FUNCTION test_refuse_job() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF NEW.args->'data' ? 'refuse' THEN
		RAISE EXCEPTION 'total size of jsonb object elements exceeds the maximum' USING ERRCODE = 'program_limit_exceeded';
	END IF;
	RETURN NEW;
END $$;
CREATE TRIGGER test_refuse_job BEFORE INSERT ON river_job FOR EACH ROW EXECUTE FUNCTION test_refuse_job()`)
	require.NoError(t, err)
	createPool(t, b.db, bustype.PoolParams{Name: "plain"})
	createPool(t, b.db, bustype.PoolParams{Name: "keyed", Ordering: bustype.OrderingKey})
	f := newFanout(t, b.db, fanout.Config{})
	before := appendOK(t, b.db, "a")
	var big int64
	require.NoError(t, b.db.QueryRow(context.Background(),
		`INSERT INTO riverbus_event (type, key, data) VALUES ('big', 'b', jsonb_build_object('refuse', repeat('x', 50000))) RETURNING global_sequence`).Scan(&big))
	after := appendOK(t, b.db, "c")
	drain(t, f)
	for _, pool := range []string{"plain", "keyed"} {
		jobs := jobStates(t, b.db, pool)
		require.Len(t, jobs, 3, pool)
		require.Equal(t, "discarded", jobs[big].state, pool)
		require.Equal(t, "refused by the database: total size of jsonb object elements exceeds the maximum",
			deadLetters(t, b.db, pool)[big].lastError, pool)
		require.Equal(t, "available", jobs[before].state, pool)
		require.Equal(t, "available", jobs[after].state, pool)
	}
}

// A real envelope over jsonb's size limit (256 MB of content; data and
// metadata are each under it, together over) is refused by the database on
// insert: the general path finds which unit it is and makes it a dead
// letter; the rest of the batch is delivered.
func TestEnvelopeOverJSONBLimitBecomesDeadLetter(t *testing.T) {
	if os.Getenv("RIVERBUS_HEAVY_TESTS") == "" {
		t.Skip("moves some 300 MB through PostgreSQL several times (about a minute on 2 cores): set RIVERBUS_HEAVY_TESTS=1")
	}
	b := setup(t)
	ctx := context.Background()
	_, err := b.db.Exec(ctx, `ALTER TABLE riverbus_event DROP CONSTRAINT riverbus_event_size`)
	require.NoError(t, err)
	createPool(t, b.db, bustype.PoolParams{Name: "plain"})
	f := newFanout(t, b.db, fanout.Config{})
	before := appendOK(t, b.db, "a")
	var big int64
	require.NoError(t, b.db.QueryRow(ctx, `INSERT INTO riverbus_event (type, key, data, metadata)
		VALUES ('big', 'a', to_jsonb(repeat('x', 140000000)), jsonb_build_object('s', repeat('y', 140000000))) RETURNING global_sequence`).Scan(&big))
	after := appendOK(t, b.db, "a")
	drain(t, f)
	jobs := jobStates(t, b.db, "plain")
	require.Len(t, jobs, 3)
	require.Equal(t, "discarded", jobs[big].state)
	require.Contains(t, deadLetters(t, b.db, "plain")[big].lastError, "refused by the database: ")
	require.Equal(t, "available", jobs[before].state)
	require.Equal(t, "available", jobs[after].state)
}

// While one pool's batches fail, or hang, the other pools go on: errors,
// backoff and slowness are per pool.
func TestFailingPoolDoesNotDelayOthers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	createPool(t, b.db, bustype.PoolParams{Name: "healthy"})
	createPool(t, b.db, bustype.PoolParams{Name: "hanging"})
	createPool(t, b.db, bustype.PoolParams{Name: "failing"})
	// The hanging pool's inserts wait for an advisory lock this test holds;
	// the failing pool's fail.
	_, err := b.db.Exec(ctx, `CREATE FUNCTION test_block_pool() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF NEW.kind = 'hanging' THEN PERFORM pg_advisory_xact_lock(4242); END IF;
	IF NEW.kind = 'failing' THEN RAISE EXCEPTION 'pool failing refuses its jobs'; END IF;
	RETURN NEW;
END $$;
CREATE TRIGGER test_block_pool BEFORE INSERT ON river_job FOR EACH ROW EXECUTE FUNCTION test_block_pool()`)
	require.NoError(t, err)
	holder, err := b.db.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = holder.Rollback(ctx) }()
	_, err = holder.Exec(ctx, `SELECT pg_advisory_xact_lock(4242)`)
	require.NoError(t, err)

	f := newFanout(t, b.db, fanout.Config{})
	runFanout(t, f)
	first := appendOK(t, b.db, "a")
	testwait.Eventually(t, time.Minute, func() bool {
		var waiting bool
		require.NoError(t, b.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND objid = 4242 AND NOT granted
			AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))`).Scan(&waiting))
		return waiting
	}, "the hanging pool's batch waits for the lock")
	for range 5 {
		seq := appendOK(t, b.db, "a")
		testwait.Eventually(t, time.Minute, func() bool {
			_, ok := jobStates(t, b.db, "healthy")[seq]
			return ok
		}, "the healthy pool's job")
	}
	require.Contains(t, jobStates(t, b.db, "healthy"), first)
	require.Empty(t, jobStates(t, b.db, "hanging"))
	require.Empty(t, jobStates(t, b.db, "failing"))

	// Released, the hanging pool catches up.
	require.NoError(t, holder.Rollback(ctx))
	testwait.Eventually(t, time.Minute, func() bool { return len(jobStates(t, b.db, "hanging")) == 6 }, "the hanging pool's jobs")
	require.Empty(t, jobStates(t, b.db, "failing"))
}

// Jobs are stamped with the database's clock (the batch transaction's
// now(), as the pool row's updated_at), not this host's, on every insert
// path: so a worker fetches them at once whatever the host's clock says.
func TestJobsTakeTheDatabaseClock(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	createPool(t, b.db, bustype.PoolParams{Name: "plain"})
	createPool(t, b.db, bustype.PoolParams{Name: "keyed", Ordering: bustype.OrderingKey})
	f := newFanout(t, b.db, fanout.Config{})
	check := func(path string) {
		t.Helper()
		rows, err := b.db.Query(ctx, `SELECT j.kind, j.created_at = p.updated_at, j.scheduled_at = p.updated_at, j.scheduled_at <= now()
			FROM river_job j JOIN riverbus_pool p ON p.name = j.kind
			WHERE (j.args->>'global_sequence')::bigint = (SELECT max(global_sequence) FROM riverbus_event)`)
		require.NoError(t, err)
		type stamp struct {
			Kind                    string
			Created, Scheduled, Due bool
		}
		stamps, err := pgx.CollectRows(rows, pgx.RowToStructByPos[stamp])
		require.NoError(t, err)
		require.Len(t, stamps, 2)
		for _, s := range stamps {
			require.True(t, s.Created && s.Scheduled && s.Due, "%s path, pool %s: created_at and scheduled_at are the batch's now()", path, s.Kind)
		}
	}
	appendOK(t, b.db, "a")
	drain(t, f)
	check("general")
	require.True(t, f.UsesPlainPath("plain"))
	appendOK(t, b.db, "a")
	drain(t, f)
	check("plain")
}
